/* The compiled delay line (issue 21): the link model, the PRNG and the hot path (receive, parse, admit, hold,
   release, batched verdicts) of orchestrator/shaping/delayline. Python (cengine.py) binds the queues, runs the
   event loop's control flow (epoll, timerfd, control socket) and calls in here once per wake-up; every per-packet
   step is here. Semantics: exactly model.py's LinkModel (the reference; tests/unit/test_delayline_engine.py runs
   both on one trace and compares release times bit for bit) and loop.py's EventLoop. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "_engine.h"

#define L2_OVERHEAD 14
#define RING 512
#define HIST_BIN_S 10e-6
#define HIST_LO_S (-0.002)
#define HIST_BINS 20200
#define LATE_S 0.02
#define READ_BUDGET 512
#define CHUNK_VERDICTS 2048
#define BUF_SIZE (1 << 17)

#define NLMSG_ERROR_T 2
#define MSG_PACKET ((3 << 8) | 0)
#define MSG_VERDICT ((3 << 8) | 1)
#define NLM_F_REQUEST 1
#define NFQA_PACKET_HDR 1
#define NFQA_VERDICT_HDR 2
#define NFQA_TIMESTAMP 4
#define NFQA_PAYLOAD 10
#define NFQA_CAP_LEN 13

/* ------------------------------------------------------------------------------------------------ PRNG */
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void dl_seed(uint64_t *s, uint64_t x) {
    for (int i = 0; i < 4; i++) {
        x += 0x9E3779B97F4A7C15ULL;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        s[i] = z ^ (z >> 31);
    }
}

uint64_t dl_next64(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double dl_random(uint64_t *s) { return (double)(dl_next64(s) >> 11) * 0x1.0p-53; }

static const double TWO_PI = 2.0 * 3.141592653589793;

double dl_gauss(uint64_t *s, double mu, double sigma) {
    double u1 = dl_random(s);
    double u2 = dl_random(s);
    return mu + sigma * (sqrt(-2.0 * log(1.0 - u1)) * cos(TWO_PI * u2));
}

/* ------------------------------------------------------------------------------------------------ link model */
dl_link *link_new(uint64_t seed64) {
    dl_link *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    dl_seed(l->s, seed64);
    l->ns = -1;
    return l;
}

void link_free(dl_link *l) {
    if (!l) return;
    free(l->deps);
    free(l->ring);
    free(l);
}

void link_set(dl_link *l, double rate_bps, double delay, double jitter, int normal, double loss, int has_ge,
              double ge_p, double ge_r, double ge_loss_bad, double ge_loss_good, int64_t limit, double reorder) {
    l->sec_per_byte = rate_bps > 0 ? 8.0 / rate_bps : 0.0;
    l->delay = delay;
    l->jitter = jitter;
    l->normal = normal;
    l->has_ge = has_ge;
    l->loss = has_ge ? 0.0 : loss;
    l->ge_p = ge_p;
    l->ge_r = ge_r;
    l->ge_loss_bad = ge_loss_bad;
    l->ge_loss_good = ge_loss_good;
    l->limit = limit > 0 ? limit : 0;
    l->reorder = reorder;
}

static inline void deps_pop_due(dl_link *l, double now) {
    while (l->dlen && l->deps[l->dhead] <= now) {
        l->dhead = (l->dhead + 1) % l->dcap;
        l->dlen--;
    }
}

static int deps_push(dl_link *l, double t) {
    if (l->dlen == l->dcap) {
        int64_t ncap = l->dcap ? 2 * l->dcap : 16;
        double *nd = malloc(ncap * sizeof *nd);
        if (!nd) return -1;
        for (int64_t i = 0; i < l->dlen; i++) nd[i] = l->deps[(l->dhead + i) % l->dcap];
        free(l->deps);
        l->deps = nd;
        l->dcap = ncap;
        l->dhead = 0;
    }
    l->deps[(l->dhead + l->dlen) % l->dcap] = t;
    l->dlen++;
    return 0;
}

double link_admit(dl_link *l, double now, int length) {
    l->packets++;
    if (l->cut) {
        l->cut_dropped++;
        return -1.0;
    }
    uint64_t *s = l->s;
    if (l->loss != 0.0) {
        if (dl_random(s) < l->loss) {
            l->lost++;
            return -1.0;
        }
    } else if (l->has_ge) {
        if (l->ge_bad) {
            if (dl_random(s) < l->ge_r) l->ge_bad = 0;
        } else if (dl_random(s) < l->ge_p) {
            l->ge_bad = 1;
        }
        if (dl_random(s) < (l->ge_bad ? l->ge_loss_bad : l->ge_loss_good)) {
            l->lost++;
            return -1.0;
        }
    }
    double dep;
    double spb = l->sec_per_byte;
    if (spb != 0.0) {
        deps_pop_due(l, now);
        if (l->limit && l->dlen >= l->limit) {
            l->overflowed++;
            return -1.0;
        }
        l->queue_sum += l->dlen;
        l->queued++;
        double busy = l->busy;
        dep = (busy > now ? busy : now) + (double)(length + L2_OVERHEAD) * spb;
        l->busy = dep;
        if (deps_push(l, dep) != 0) { /* out of memory: count it as an overflow */
            l->overflowed++;
            l->queued--;
            l->queue_sum -= l->dlen;
            return -1.0;
        }
        if (l->dlen > l->max_queue) l->max_queue = l->dlen;
    } else {
        dep = now;
    }
    double rel;
    if (l->reorder != 0.0 && dl_random(s) < l->reorder) {
        rel = dep;
        l->reordered++;
    } else {
        rel = dep + l->delay;
        double j = l->jitter;
        if (j != 0.0) {
            rel += l->normal ? dl_gauss(s, 0.0, j) : (-j + (j - -j) * dl_random(s));
            if (rel < dep) rel = dep;
        }
        if (rel < l->floor) rel = l->floor;
        l->floor = rel;
    }
    if (rel <= now) {
        l->accepted++;
    } else {
        l->delayed++;
        l->held++;
    }
    return rel;
}

int64_t link_queue_len(dl_link *l, double now) {
    deps_pop_due(l, now);
    return l->dlen;
}

int64_t link_cut(dl_link *l) {
    int64_t n = l->held;
    l->cut = 1;
    l->cut_dropped += n;
    l->held = 0;
    l->gen++;
    l->dlen = l->dhead = 0;
    l->busy = l->floor = 0.0;
    return n;
}

int64_t link_release_all(dl_link *l) {
    int64_t n = l->held;
    l->accepted += n;
    l->held = 0;
    l->gen++;
    return n;
}

/* ------------------------------------------------------------------------------------------------ engine */
typedef struct {
    double t;
    uint64_t seq;
    dl_link *l;
    int64_t gen;
    uint32_t id;
} hent;

typedef struct {
    double t_empty;
    int fd, used, dirty;
    uint8_t *pend;
    size_t plen, pcap;
    dl_link **links;
    int nlinks, lcap;
} dl_ns;

struct dl_engine {
    int copy_range;
    dl_ns *ns;
    int nns, cns;
    int *dirty;
    int ndirty;
    hent *heap;
    int64_t hlen, hcap;
    uint64_t seq;
    uint8_t *buf;
    int64_t hist[HIST_BINS];
    int64_t hist_n;
    double hist_max, hist_min;
    int64_t unknown_queue, verdict_errors, recvs, packets;
    int last_errno, last_err_ns;
    int late;
    double late_err;
    int late_ns, late_qnum;
    /* the C event loop (engine_loop_init / engine_run) */
    int epfd, tfd, pyfd;
    double advance, advance_max, advance_step, armed, t_flushed, t_wait, t_wake, t_prev;
    int64_t wakeups;
    int flush_failed, flush_ns, flush_errno;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec) / 1e9; /* as Python's time.monotonic */
}

dl_engine *engine_new(int copy_range) {
    dl_engine *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->copy_range = copy_range;
    e->buf = malloc(BUF_SIZE);
    if (!e->buf) {
        free(e);
        return NULL;
    }
    e->hist_max = -INFINITY;
    e->hist_min = INFINITY;
    e->epfd = e->tfd = e->pyfd = -1;
    e->armed = NAN;
    return e;
}

void engine_free(dl_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->nns; i++) {
        free(e->ns[i].pend);
        free(e->ns[i].links);
    }
    free(e->ns);
    free(e->dirty);
    free(e->heap);
    free(e->buf);
    if (e->epfd >= 0) close(e->epfd);
    if (e->tfd >= 0) close(e->tfd);
    free(e);
}

#define EV_TIMER UINT64_MAX
#define EV_PY (UINT64_MAX - 1)

static int ep_add(dl_engine *e, int fd, uint64_t data) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
    return epoll_ctl(e->epfd, EPOLL_CTL_ADD, fd, &ev);
}

int engine_add_ns(dl_engine *e, int fd) {
    int i;
    for (i = 0; i < e->nns; i++)
        if (!e->ns[i].used) break;
    if (i == e->nns) {
        if (e->nns == e->cns) {
            int nc = e->cns ? 2 * e->cns : 16;
            dl_ns *n = realloc(e->ns, nc * sizeof *n);
            if (!n) return -1;
            e->ns = n;
            int *d = realloc(e->dirty, nc * sizeof *d);
            if (!d) return -1;
            e->dirty = d;
            e->cns = nc;
        }
        e->nns++;
    }
    memset(&e->ns[i], 0, sizeof e->ns[i]);
    e->ns[i].fd = fd;
    e->ns[i].used = 1;
    if (e->epfd >= 0 && ep_add(e, fd, (uint64_t)i) != 0) return -1;
    return i;
}

void engine_remove_ns(dl_engine *e, int i) {
    dl_ns *n = &e->ns[i];
    if (e->epfd >= 0) epoll_ctl(e->epfd, EPOLL_CTL_DEL, n->fd, NULL);
    for (int k = 0; k < e->ndirty; k++)
        if (e->dirty[k] == i) {
            e->dirty[k] = e->dirty[--e->ndirty];
            break;
        }
    free(n->pend);
    free(n->links);
    memset(n, 0, sizeof *n);
    n->fd = -1;
}

int engine_add_link(dl_engine *e, int i, int qnum, dl_link *l) {
    dl_ns *n = &e->ns[i];
    if (n->nlinks == n->lcap) {
        int nc = n->lcap ? 2 * n->lcap : 4;
        dl_link **a = realloc(n->links, nc * sizeof *a);
        if (!a) return -1;
        n->links = a;
        n->lcap = nc;
    }
    n->links[n->nlinks++] = l;
    l->ns = i;
    l->qnum = qnum;
    return 0;
}

static void sift_down(hent *h, int64_t n, int64_t i);
static void sift_up(hent *h, int64_t i);

void engine_remove_link(dl_engine *e, dl_link *l) {
    if (l->ns >= 0 && l->ns < e->nns) {
        dl_ns *n = &e->ns[l->ns];
        for (int k = 0; k < n->nlinks; k++)
            if (n->links[k] == l) {
                n->links[k] = n->links[--n->nlinks];
                break;
            }
    }
    int64_t w = 0;
    for (int64_t r = 0; r < e->hlen; r++)
        if (e->heap[r].l != l) e->heap[w++] = e->heap[r];
    if (w != e->hlen) {
        e->hlen = w;
        for (int64_t i = w / 2 - 1; i >= 0; i--) sift_down(e->heap, w, i);
    }
    l->ns = -1;
}

static inline dl_link *find_link(dl_ns *n, int qnum) {
    for (int k = 0; k < n->nlinks; k++)
        if (n->links[k]->qnum == qnum) {
            if (k) { /* move to front: a namespace's busiest queue is found first */
                dl_link *t = n->links[k];
                n->links[k] = n->links[k - 1];
                n->links[k - 1] = t;
            }
            return n->links[k > 0 ? k - 1 : 0];
        }
    return NULL;
}

/* heap of held packets, ordered by (release time, arrival sequence) */
static inline int hless(const hent *a, const hent *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void sift_up(hent *h, int64_t i) {
    hent x = h[i];
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!hless(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static void sift_down(hent *h, int64_t n, int64_t i) {
    hent x = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static int heap_push(dl_engine *e, double t, dl_link *l, uint32_t id) {
    if (e->hlen == e->hcap) {
        int64_t nc = e->hcap ? 2 * e->hcap : 1024;
        hent *h = realloc(e->heap, nc * sizeof *h);
        if (!h) return -1;
        e->heap = h;
        e->hcap = nc;
    }
    hent *x = &e->heap[e->hlen];
    x->t = t;
    x->seq = ++e->seq;
    x->l = l;
    x->gen = l->gen;
    x->id = id;
    sift_up(e->heap, e->hlen++);
    return 0;
}

static void heap_pop(dl_engine *e) {
    e->heap[0] = e->heap[--e->hlen];
    if (e->hlen) sift_down(e->heap, e->hlen, 0);
}

/* verdicts: 32 bytes each, appended to the namespace's pending buffer, sent at the next flush */
static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put16be(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }
static inline void put32be(uint8_t *p, uint32_t v) {
    p[0] = v >> 24; p[1] = (v >> 16) & 0xff; p[2] = (v >> 8) & 0xff; p[3] = v & 0xff;
}
static inline uint16_t get16be(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get32be(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void engine_verdict(dl_engine *e, int i, int qnum, uint32_t id, int v) {
    dl_ns *n = &e->ns[i];
    if (n->plen + 32 > n->pcap) {
        size_t nc = n->pcap ? 2 * n->pcap : 32 * 64;
        uint8_t *b = realloc(n->pend, nc);
        if (!b) return; /* the packet stays queued in the kernel: kernel_maxlen / the checks report it */
        n->pend = b;
        n->pcap = nc;
    }
    uint8_t *p = n->pend + n->plen;
    put32(p, 32);
    put16(p + 4, MSG_VERDICT);
    put16(p + 6, NLM_F_REQUEST);
    put32(p + 8, 0);
    put32(p + 12, 0);
    p[16] = 0; /* AF_UNSPEC */
    p[17] = 0;
    put16be(p + 18, (uint16_t)qnum);
    put16(p + 20, 12);
    put16(p + 22, NFQA_VERDICT_HDR);
    put32be(p + 24, (uint32_t)v);
    put32be(p + 28, id);
    n->plen += 32;
    if (!n->dirty) {
        n->dirty = 1;
        e->dirty[e->ndirty++] = i;
    }
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC (s): NFQA_TIMESTAMP is realtime. */
static double realtime_minus_mono(void) {
    struct timespec r, a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double m = ((double)a.tv_sec + (double)b.tv_sec + (a.tv_nsec + b.tv_nsec) * 1e-9) / 2;
    return (double)r.tv_sec + r.tv_nsec * 1e-9 - m;
}

/* One queued-packet message: (qnum, id, IPv4 total length, or the copied / captured length; with kt: its
   NFQA_TIMESTAMP in realtime seconds, 0 without one). As nfqueue.py's packet_parser. Returns 1 for a packet, 2 for
   a negative ack (errno in *len), 0 otherwise. */
static int parse_one(const uint8_t *m, uint32_t mlen, int *qnum, uint32_t *id, int *len, double *kt) {
    uint16_t mtype;
    memcpy(&mtype, m + 4, 2);
    if (mtype == MSG_PACKET) {
        if (mlen < 20) return 0;
        *qnum = get16be(m + 18);
        uint32_t pid = 0xFFFFFFFFu;
        int length = 0;
        uint32_t cap = 0;
        uint32_t a = 20;
        while (a + 4 <= mlen) {
            uint16_t alen, atype;
            memcpy(&alen, m + a, 2);
            memcpy(&atype, m + a + 2, 2);
            if (alen < 4) break;
            atype &= 0x3FFF;
            if (atype == NFQA_PACKET_HDR && alen >= 8) {
                pid = get32be(m + a + 4);
            } else if (atype == NFQA_PAYLOAD) {
                int plen = alen - 4;
                length = (plen >= 4 && (m[a + 4] >> 4) == 4) ? get16be(m + a + 6) : plen;
            } else if (atype == NFQA_CAP_LEN && alen >= 8) {
                cap = get32be(m + a + 4);
            } else if (kt && atype == NFQA_TIMESTAMP && alen >= 20) {
                uint64_t sec = ((uint64_t)get32be(m + a + 4) << 32) | get32be(m + a + 8);
                uint64_t usec = ((uint64_t)get32be(m + a + 12) << 32) | get32be(m + a + 16);
                *kt = (double)sec + (double)usec * 1e-6;
            }
            a += (alen + 3) & ~3u;
        }
        *id = pid;
        *len = length ? length : (int)cap;
        return 1;
    }
    if (mtype == NLMSG_ERROR_T && mlen >= 20) {
        int32_t err;
        memcpy(&err, m + 16, 4);
        if (err) {
            *len = -err;
            return 2;
        }
    }
    return 0;
}

int engine_parse(const uint8_t *buf, size_t n, int copy_range, int *qnums, uint32_t *ids, int *lens, int max) {
    (void)copy_range;
    size_t off = 0;
    int k = 0;
    while (off + 16 <= n && k < max) {
        uint32_t mlen;
        memcpy(&mlen, buf + off, 4);
        if (mlen < 16) break;
        if (off + mlen > n) mlen = (uint32_t)(n - off);
        int r = parse_one(buf + off, mlen, &qnums[k], &ids[k], &lens[k], NULL);
        if (r == 1) k++;
        off += (mlen + 3) & ~3u;
    }
    return k;
}

static void released(dl_engine *e, dl_link *l, double err);

void engine_admit_buf(dl_engine *e, int i, const uint8_t *buf, size_t n, double now) {
    dl_ns *ns = &e->ns[i];
    size_t off = 0;
    double rt_off = 0.0;
    int have_off = 0;
    while (off + 16 <= n) {
        uint32_t mlen;
        memcpy(&mlen, buf + off, 4);
        if (mlen < 16) break;
        if (off + mlen > n) mlen = (uint32_t)(n - off);
        int qnum, len;
        uint32_t id;
        double kt = 0.0;
        int r = parse_one(buf + off, mlen, &qnum, &id, &len, &kt);
        off += (mlen + 3) & ~3u;
        if (r == 2) {
            e->verdict_errors++;
            e->last_errno = len;
            e->last_err_ns = i;
            continue;
        }
        if (r != 1) continue;
        e->packets++;
        dl_link *l = find_link(ns, qnum);
        if (!l) {
            e->unknown_queue++;
            engine_verdict(e, i, qnum, id, 0);
            continue;
        }
        /* a forwarded packet queued in FORWARD carries the time it arrived in this namespace: admit it then */
        double t = now;
        if (kt > 0.0) {
            if (!have_off) {
                rt_off = realtime_minus_mono();
                have_off = 1;
            }
            if (kt - rt_off < now) t = kt - rt_off;
        }
        double rel = link_admit(l, t, len);
        if (rel < 0) {
            engine_verdict(e, i, qnum, id, 0);
        } else if (rel <= now) {
            engine_verdict(e, i, qnum, id, 1);
            /* admitted at its kernel time t, the model held it (rel > t): it goes out now, now - rel late */
            if (rel > t) released(e, l, now - rel);
        } else if (heap_push(e, rel, l, id) != 0) {
            /* out of memory: release it now rather than lose it */
            l->held--;
            l->accepted++;
            engine_verdict(e, i, qnum, id, 1);
        }
    }
}

int engine_read(dl_engine *e, int i, double stamp, double *t_empty) {
    int fd = e->ns[i].fd;
    for (int k = 0; k < READ_BUDGET; k++) {
        ssize_t n = recv(fd, e->buf, BUF_SIZE, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                *t_empty = mono();
                return 0;
            }
            return -errno;
        }
        double now = stamp;
        stamp = mono();
        e->recvs++;
        engine_admit_buf(e, i, e->buf, (size_t)n, now);
    }
    return 1;
}

/* A held packet goes out at `now`, `err` after its release time: counters and the hold error. */
static void released(dl_engine *e, dl_link *l, double err) {
    const int last = HIST_BINS - 1;
    l->held--;
    l->accepted++;
    if (!l->ring) l->ring = calloc(RING, sizeof(double));
    if (l->ring) l->ring[l->err_n % RING] = err;
    l->err_n++;
    l->err_sum += err;
    if (err > l->err_max) l->err_max = err;
    double bd = (err - HIST_LO_S) / HIST_BIN_S;
    e->hist[bd >= last ? last : (bd > 0 ? (int)bd : 0)]++;
    if (err > e->hist_max) {
        e->hist_max = err;
        if (err > LATE_S) {
            e->late = 1;
            e->late_err = err;
            e->late_ns = l->ns;
            e->late_qnum = l->qnum;
        }
    }
    if (err < e->hist_min) e->hist_min = err;
    e->hist_n++;
}

int64_t engine_release(dl_engine *e, double now, double horizon) {
    int64_t n = 0;
    while (e->hlen && e->heap[0].t <= horizon) {
        hent x = e->heap[0];
        heap_pop(e);
        dl_link *l = x.l;
        if (x.gen != l->gen) continue;
        engine_verdict(e, l->ns, l->qnum, x.id, 1);
        released(e, l, now - x.t);
        n++;
    }
    return n;
}

double engine_next_due(dl_engine *e) { return e->hlen ? e->heap[0].t : INFINITY; }
int64_t engine_heap_len(dl_engine *e) { return e->hlen; }
void engine_clear_heap(dl_engine *e) { e->hlen = 0; }

int64_t engine_dispose(dl_engine *e, dl_link *l, int64_t gen, int v) {
    int64_t k = 0;
    for (int64_t r = 0; r < e->hlen; r++)
        if (e->heap[r].l == l && e->heap[r].gen == gen) {
            engine_verdict(e, l->ns, l->qnum, e->heap[r].id, v);
            k++;
        }
    return k;
}

int engine_pending(dl_engine *e) { return e->ndirty; }

static int flush_all(dl_engine *e, int *failed_ns, int *failed_errno);

int engine_flush(dl_engine *e, int *failed_ns, int *failed_errno) { return flush_all(e, failed_ns, failed_errno); }

static int flush_all(dl_engine *e, int *failed_ns, int *failed_errno) {
    int failed = 0;
    for (int k = 0; k < e->ndirty; k++) {
        dl_ns *n = &e->ns[e->dirty[k]];
        size_t off = 0;
        while (off < n->plen) {
            size_t len = n->plen - off;
            if (len > (size_t)CHUNK_VERDICTS * 32) len = (size_t)CHUNK_VERDICTS * 32;
            ssize_t r = send(n->fd, n->pend + off, len, MSG_DONTWAIT);
            if (r < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    struct pollfd p = {.fd = n->fd, .events = POLLOUT};
                    poll(&p, 1, 10);
                    continue;
                }
                if (!failed) {
                    *failed_ns = e->dirty[k];
                    *failed_errno = errno;
                }
                failed++;
            }
            off += len;
        }
        n->plen = 0;
        n->dirty = 0;
    }
    e->ndirty = 0;
    return failed;
}

void engine_stats(dl_engine *e, int64_t *out) {
    out[0] = e->unknown_queue;
    out[1] = e->verdict_errors;
    out[2] = e->hist_n;
    out[3] = e->hlen;
    out[4] = e->recvs;
    out[5] = e->packets;
}

double engine_hist_max(dl_engine *e) { return e->hist_max; }
double engine_hist_min(dl_engine *e) { return e->hist_min; }

double engine_hist_quantile(dl_engine *e, double q) {
    if (!e->hist_n) return NAN;
    double target = q * (double)e->hist_n;
    int64_t acc = 0;
    for (int i = 0; i < HIST_BINS; i++) {
        int64_t c = e->hist[i];
        acc += c;
        if ((double)acc >= target && c) return HIST_LO_S + (double)(i + 1) * HIST_BIN_S;
    }
    return e->hist_max;
}

void engine_reset_hist(dl_engine *e) {
    memset(e->hist, 0, sizeof e->hist);
    e->hist_n = 0;
    e->hist_max = -INFINITY;
    e->hist_min = INFINITY;
}

void engine_hist_copy(dl_engine *e, int64_t *out) { memcpy(out, e->hist, sizeof e->hist); }

int engine_take_late(dl_engine *e, double *err, int *ns, int *qnum) {
    if (!e->late) return 0;
    e->late = 0;
    *err = e->late_err;
    *ns = e->late_ns;
    *qnum = e->late_qnum;
    return 1;
}

int engine_last_error(dl_engine *e, int *ns) {
    *ns = e->last_err_ns;
    return e->last_errno;
}

/* ------------------------------------------------------------------------------------------------ the C loop */
int engine_loop_init(dl_engine *e, int pyfd, double advance, double advance_max, double advance_step) {
    e->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd < 0) return -errno;
    e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (e->tfd < 0) return -errno;
    if (ep_add(e, e->tfd, EV_TIMER) != 0 || ep_add(e, pyfd, EV_PY) != 0) return -errno;
    e->pyfd = pyfd;
    for (int i = 0; i < e->nns; i++)
        if (e->ns[i].used && ep_add(e, e->ns[i].fd, (uint64_t)i) != 0) return -errno;
    e->advance = advance;
    e->advance_max = advance_max;
    e->advance_step = advance_step;
    e->t_prev = mono();
    return 0;
}

static void arm(dl_engine *e, double t) {
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (!isnan(t)) {
        time_t sec = (time_t)t;
        its.it_value.tv_sec = sec;
        its.it_value.tv_nsec = (long)((t - (double)sec) * 1e9);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    }
    timerfd_settime(e->tfd, isnan(t) ? 0 : TFD_TIMER_ABSTIME, &its, NULL);
}

#define MAX_EVENTS 256

/* loop.py's _dispatch for the namespaces: stamp = when the first waiting packet most likely reached the queue */
static int dispatch(dl_engine *e, struct epoll_event *evs, int n, double now, double slept_since, double after,
                    int *py_ready) {
    for (int k = 0; k < n; k++) {
        uint64_t d = evs[k].data.u64;
        if (d == EV_TIMER) continue;
        if (d == EV_PY) {
            *py_ready = 1;
            continue;
        }
        int i = (int)d;
        if (i >= e->nns || !e->ns[i].used) continue;
        double stamp, t;
        if (!isnan(slept_since)) {
            t = now - e->advance;
            stamp = t > slept_since ? t : slept_since;
        } else {
            t = e->t_flushed;
            if (e->ns[i].t_empty > t) t = e->ns[i].t_empty;
            if (after > t) t = after;
            stamp = t < now ? t : now;
        }
        int r = engine_read(e, i, stamp, &e->ns[i].t_empty);
        if (r < 0) return r;
    }
    return 0;
}

static void flush_checked(dl_engine *e) {
    int fns = 0, ferr = 0;
    if (flush_all(e, &fns, &ferr) && !e->flush_failed) {
        e->flush_failed = 1;
        e->flush_ns = fns;
        e->flush_errno = ferr;
    }
}

/* Serve wake-ups until Python has work (its epoll fd is ready: 1) or `until` passed (0: housekeeping); <0: -errno.
   One iteration is loop.py's EventLoop.run body, step for step. */
int engine_run(dl_engine *e, double until) {
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        double t_poll = mono();
        double left = until - t_poll;
        int ms = left > 0 ? (int)ceil(left * 1e3) : 0;
        int n = epoll_wait(e->epfd, evs, MAX_EVENTS, ms);
        if (n < 0) {
            if (errno != EINTR) return -errno;
            n = 0;
        }
        e->wakeups++;
        double now = mono();
        e->t_wait = t_poll;
        e->t_wake = now;
        double advance = e->advance;
        int fired = 0, py_ready = 0;
        for (int k = 0; k < n; k++)
            if (evs[k].data.u64 == EV_TIMER) {
                fired = 1;
                if (now - e->armed > advance) {
                    advance += e->advance_step;
                    if (advance > e->advance_max) advance = e->advance_max;
                } else {
                    advance -= e->advance_step;
                    if (advance < 0) advance = 0;
                }
                e->advance = advance;
                break;
            }
        if (e->hlen && e->heap[0].t <= now + advance) engine_release(e, now, now + advance);
        /* a packet found after a sleep arrived during it, also when the timer ended the sleep (loop.py) */
        int r = dispatch(e, evs, n, now, (now - t_poll > 20e-6) ? t_poll : NAN, e->t_prev, &py_ready);
        if (r < 0) return r;
        e->t_prev = now;
        for (;;) {
            now = mono();
            if (e->hlen && e->heap[0].t <= now + advance) engine_release(e, now, now + advance);
            if (!e->ndirty) break;
            flush_checked(e);
            e->t_flushed = mono();
            n = epoll_wait(e->epfd, evs, MAX_EVENTS, 0);
            if (n <= 0) break;
            r = dispatch(e, evs, n, e->t_flushed, NAN, e->t_flushed, &py_ready);
            if (r < 0) return r;
            if (now >= until) break; /* saturated: let Python housekeep, then come back */
        }
        if (e->hlen) {
            double t = e->heap[0].t - advance;
            if (fired || t != e->armed) {
                arm(e, t);
                e->armed = t;
            }
        } else if (fired) {
            arm(e, NAN);
            e->armed = NAN;
        }
        if (py_ready) return 1;
        if (now >= until) return 0;
    }
}

void engine_loop_info(dl_engine *e, double *out) {
    out[0] = e->advance;
    out[1] = (double)e->wakeups;
    out[2] = e->t_wait;
    out[3] = e->t_wake;
}

int engine_take_flush_error(dl_engine *e, int *ns, int *err) {
    if (!e->flush_failed) return 0;
    e->flush_failed = 0;
    *ns = e->flush_ns;
    *err = e->flush_errno;
    return 1;
}
