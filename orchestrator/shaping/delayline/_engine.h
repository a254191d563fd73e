/* The compiled delay line (issue 21): declarations shared by _engine.c and its cffi binding (build_engine.py
   hands this file to ffi.cdef, so it holds declarations only: no preprocessor lines, no macros).
   Times are CLOCK_MONOTONIC seconds as doubles (time.monotonic), so release times are bit-identical to the Python
   model's (model.py), which stays the reference. */

typedef struct dl_link {
    /* parameters (link_set) */
    double sec_per_byte, delay, jitter, loss, reorder;
    double ge_p, ge_r, ge_loss_bad, ge_loss_good;
    int normal, has_ge;
    int64_t limit;
    /* state */
    int cut, ge_bad;
    int64_t gen;
    double busy, floor;
    double *deps;
    int64_t dcap, dhead, dlen;
    uint64_t s[4];
    /* counters (model.py's names) */
    int64_t packets, accepted, delayed, reordered, lost, overflowed, cut_dropped, max_queue, queue_sum, queued,
            held;
    /* where its packets come from (engine) and the hold-error samples of its releases */
    int ns, qnum;
    int64_t err_n;
    double err_sum, err_max;
    double *ring;
} dl_link;

/* the PRNG (prng.py): splitmix64 seeding xoshiro256** */
void dl_seed(uint64_t *s, uint64_t seed64);
uint64_t dl_next64(uint64_t *s);
double dl_random(uint64_t *s);
double dl_gauss(uint64_t *s, double mu, double sigma);

/* the pure link model (model.py's LinkModel) */
dl_link *link_new(uint64_t seed64);
void link_free(dl_link *l);
void link_set(dl_link *l, double rate_bps, double delay, double jitter, int normal, double loss, int has_ge,
              double ge_p, double ge_r, double ge_loss_bad, double ge_loss_good, int64_t limit, double reorder);
double link_admit(dl_link *l, double now, int length);   /* release time, or -1.0: dropped */
int64_t link_queue_len(dl_link *l, double now);
int64_t link_cut(dl_link *l);
int64_t link_release_all(dl_link *l);

/* the engine: NFQUEUE sockets (bound by Python), the heap of held packets, batched verdicts */
typedef struct dl_engine dl_engine;
dl_engine *engine_new(int copy_range);
void engine_free(dl_engine *e);
int engine_add_ns(dl_engine *e, int fd);
void engine_remove_ns(dl_engine *e, int ns);
int engine_add_link(dl_engine *e, int ns, int qnum, dl_link *l);
void engine_remove_link(dl_engine *e, dl_link *l);
int engine_read(dl_engine *e, int ns, double stamp, double *t_empty);
void engine_admit_buf(dl_engine *e, int ns, const uint8_t *buf, size_t n, double now);
int engine_parse(const uint8_t *buf, size_t n, int copy_range, int *qnums, uint32_t *ids, int *lens, int max);
int64_t engine_release(dl_engine *e, double now, double horizon);
double engine_next_due(dl_engine *e);
int64_t engine_heap_len(dl_engine *e);
void engine_clear_heap(dl_engine *e);
void engine_verdict(dl_engine *e, int ns, int qnum, uint32_t id, int v);
int64_t engine_dispose(dl_engine *e, dl_link *l, int64_t gen, int v);
int engine_pending(dl_engine *e);
int engine_flush(dl_engine *e, int *failed_ns, int *failed_errno);
void engine_stats(dl_engine *e, int64_t *out);
double engine_hist_max(dl_engine *e);
double engine_hist_min(dl_engine *e);
double engine_hist_quantile(dl_engine *e, double q);
void engine_reset_hist(dl_engine *e);
void engine_hist_copy(dl_engine *e, int64_t *out);
int engine_take_late(dl_engine *e, double *err, int *ns, int *qnum);
int engine_last_error(dl_engine *e, int *ns);

/* the event loop in C (loop.py's EventLoop.run, per wake-up): its own epoll (the namespaces' sockets, its own
   timerfd, and Python's epoll fd nested for the control socket and signals) */
int engine_loop_init(dl_engine *e, int pyfd, double advance, double advance_max, double advance_step);
int engine_run(dl_engine *e, double until);
void engine_loop_info(dl_engine *e, double *out);
int engine_take_flush_error(dl_engine *e, int *ns, int *err);
