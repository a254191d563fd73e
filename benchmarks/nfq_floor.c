/* The NFQUEUE floor (issue #21): the least a userspace NFQUEUE program can do per packet -- libnetfilter_queue,
 * copy mode PACKET with a small copy range (as the delay line), ACCEPT every packet at once, one verdict per
 * packet. What is left is the kernel's queue round trip (enqueue, netlink message, recv, verdict, reinject) and
 * libnetfilter_queue's parsing: the floor against which the delay line's CPU per packet-hop is judged.
 *
 *     nfq_floor QUEUE_NUM [--copy BYTES] [--trace FILE]
 *     nfq_floor --flood IPV4 PORT SECONDS
 *
 * Prints "READY <pid>" once the queue is bound; on SIGUSR1 a line "STAT <packets> <user_us> <sys_us>" (its own
 * getrusage: the CPU of this program only); on SIGTERM/SIGINT a last STAT line, then exits 0.
 * --trace FILE (use --copy 64 or more): per packet one 40-byte record (little-endian): int64 CLOCK_MONOTONIC ns
 * when the recv() that brought it returned, int64 NFQA_TIMESTAMP in CLOCK_REALTIME ns (0 when the kernel sent
 * none), 24 bytes of the packet from IP offset 20 (UDP header + 16 payload bytes; zero-padded). Written at exit.
 *
 * --flood: the other end, a sender as fast as one core goes (sendmmsg, 64 packets per call, 100-byte IP packets
 * whose payload starts with the benchmark's header: int64 seq, int64 CLOCK_MONOTONIC ns, big-endian); prints
 * "SENT <packets> <seconds>" and exits.
 *
 * Built by benchmarks/bench_floor.py at run time: gcc -O2 nfq_floor.c -lnetfilter_queue -lnfnetlink
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif
#ifndef NETLINK_NO_ENOBUFS
#define NETLINK_NO_ENOBUFS 5
#endif

struct rec {
    int64_t t_read_ns;
    int64_t t_nfq_real_ns;
    unsigned char head[24];
};

static volatile sig_atomic_t want_stat, want_stop;
static uint64_t packets;
static int64_t t_read_ns;
static struct rec *trace;
static size_t trace_n, trace_cap;

static void on_usr1(int s) { (void)s; want_stat = 1; }
static void on_stop(int s) { (void)s; want_stop = 1; }

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void print_stat(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("STAT %llu %lld %lld\n", (unsigned long long)packets,
           (long long)ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec,
           (long long)ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec);
    fflush(stdout);
}

static int cb(struct nfq_q_handle *qh, struct nfgenmsg *nfmsg, struct nfq_data *nfa, void *data) {
    (void)nfmsg;
    (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    uint32_t id = ph ? ntohl(ph->packet_id) : 0;
    packets++;
    if (trace) {
        if (trace_n == trace_cap) {
            size_t cap = trace_cap ? 2 * trace_cap : 1 << 16;
            struct rec *t = realloc(trace, cap * sizeof *t);
            if (t) {
                trace = t;
                trace_cap = cap;
            }
        }
        if (trace_n < trace_cap) {
            struct rec *r = &trace[trace_n++];
            struct timeval tv;
            unsigned char *pl;
            int n;
            memset(r, 0, sizeof *r);
            r->t_read_ns = t_read_ns;
            if (nfq_get_timestamp(nfa, &tv) == 0)
                r->t_nfq_real_ns = (int64_t)tv.tv_sec * 1000000000LL + (int64_t)tv.tv_usec * 1000LL;
            n = nfq_get_payload(nfa, &pl);
            if (n > 20)
                memcpy(r->head, pl + 20, (size_t)(n - 20) < sizeof r->head ? (size_t)(n - 20) : sizeof r->head);
        }
    }
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
}

static uint64_t htobe64_(uint64_t x) {
    return ((uint64_t)htonl((uint32_t)x) << 32) | htonl((uint32_t)(x >> 32));
}

static int flood(const char *ip, int port, double seconds) {
    enum { BATCH = 64, PAYLOAD = 72 };
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in dst;
    memset(&dst, 0, sizeof dst);
    dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)port);
    if (s < 0 || inet_pton(AF_INET, ip, &dst.sin_addr) != 1 ||
        connect(s, (struct sockaddr *)&dst, sizeof dst) < 0) {
        perror("flood");
        return 1;
    }
    static unsigned char bufs[BATCH][PAYLOAD];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = PAYLOAD;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int64_t t0 = mono_ns(), end = t0 + (int64_t)(seconds * 1e9), now = t0;
    uint64_t seq = 0;
    while (now < end) {
        for (int i = 0; i < BATCH; i++) {
            uint64_t a = htobe64_(seq + (uint64_t)i), b = htobe64_((uint64_t)now);
            memcpy(bufs[i], &a, 8);
            memcpy(bufs[i] + 8, &b, 8);
        }
        int n = sendmmsg(s, msgs, BATCH, 0);
        if (n > 0)
            seq += (uint64_t)n;
        now = mono_ns();
    }
    printf("SENT %llu %.6f\n", (unsigned long long)seq, (double)(now - t0) / 1e9);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--flood"))
        return flood(argv[2], atoi(argv[3]), atof(argv[4]));
    int qnum = -1, copy = 40, one = 1, rcvbuf = 8 << 20;
    const char *trace_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--copy") && i + 1 < argc)
            copy = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
            trace_path = argv[++i];
        else if (qnum < 0)
            qnum = atoi(argv[i]);
        else {
            fprintf(stderr, "usage: nfq_floor QUEUE_NUM [--copy BYTES] [--trace FILE]\n");
            return 2;
        }
    }
    if (qnum < 0) {
        fprintf(stderr, "usage: nfq_floor QUEUE_NUM [--copy BYTES] [--trace FILE]\n");
        return 2;
    }
    if (trace_path) {
        trace_cap = 1 << 16;
        trace = malloc(trace_cap * sizeof *trace);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);  /* no SA_RESTART: a signal interrupts recv() */
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct nfq_handle *h = nfq_open();
    if (!h) {
        perror("nfq_open");
        return 1;
    }
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)qnum, cb, NULL);
    if (!qh) {
        perror("nfq_create_queue");
        return 1;
    }
    if (nfq_set_mode(qh, NFQNL_COPY_PACKET, (uint32_t)copy) < 0) {
        perror("nfq_set_mode");
        return 1;
    }
    nfq_set_queue_maxlen(qh, 65536);
    int fd = nfq_fd(h);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    /* a SIGUSR1 that lands between the want_stat check and recv() would wait for the next packet, forever on an
       idle queue: recv() returns every 100 ms so that the flag is seen */
    struct timeval tick = {0, 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof tick);
    printf("READY %d\n", (int)getpid());
    fflush(stdout);

    static char buf[1 << 17] __attribute__((aligned));
    while (!want_stop) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (want_stat) {
            want_stat = 0;
            print_stat();
        }
        if (n < 0) {
            if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            perror("recv");
            break;
        }
        t_read_ns = mono_ns();
        nfq_handle_packet(h, buf, (int)n);
    }
    print_stat();
    nfq_destroy_queue(qh);
    nfq_close(h);
    if (trace_path) {
        FILE *f = fopen(trace_path, "wb");
        if (!f || fwrite(trace, sizeof *trace, trace_n, f) != trace_n) {
            perror("trace");
            return 1;
        }
        fclose(f);
    }
    return 0;
}
