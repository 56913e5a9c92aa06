/* ppo_link_host.c: ppo_policy_act for a control loop whose policy runs on another device, over ppo_link.h's
 * frames. Written by ppo_trt (`ppo-trt c-loop --target`); do not edit. Linked instead of ppo_policy.c, it keeps the
 * library's contract (PPO_POLICY_OK with `act` written, or a status with `act` untouched: an answer holding a NaN or
 * an inf is PPO_POLICY_NONFINITE_ACTION, whatever status the device sent) and adds two statuses (ppo_link.h):
 * PPO_LINK_TIMEOUT, no valid answer within the timeout, and PPO_LINK_DOWN, the link is closed or broken (or could not
 * be opened); from then on every call returns PPO_LINK_DOWN at once. The loop's fallback acts, as for any status but
 * PPO_POLICY_OK; nothing here exits the process or lets a write to a closed link raise SIGPIPE. From the environment:
 *   PPO_LINK               the Unix socket the device's serial line is on (required)
 *   PPO_LINK_TIMEOUT_MS    how long a call waits for its answer (default 500)
 *   PPO_LINK_CORRUPT_CALL  flip one bit of the observation frame of this call (counted from 0), after its checksum
 *   PPO_LINK_STATS         a file to write the link's counters to, as JSON, at exit */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "ppo_policy.h"
#include "ppo_link.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0  /* no such flag: a platform without it has no SIGPIPE on sockets either (or sets SO_NOSIGPIPE) */
#endif

static int fd = -1, down, timeout_ms = 500;  /* down: the link closed, broke or never opened; it stays down */
static long long corrupt_call = -1, calls, answers, timeouts, bad_frames, stale_frames;
static uint8_t seq;

static long long env_count(const char *name, long long fallback) {
    const char *s = getenv(name);
    char *end;
    long long v;
    if (!s || !*s) return fallback;
    v = strtoll(s, &end, 10);
    return *end ? fallback : v;
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void write_stats(void) {
    const char *path = getenv("PPO_LINK_STATS");
    FILE *f;
    if (!path || !(f = fopen(path, "w"))) return;
    fprintf(f, "{\"calls\": %lld, \"answers\": %lld, \"timeouts\": %lld, \"bad_frames\": %lld, \"stale_frames\": %lld, "
            "\"timeout_ms\": %d, \"corrupted_call\": %lld}\n", calls, answers, timeouts, bad_frames, stale_frames,
            timeout_ms, corrupt_call);
    fclose(f);
}

static int send_all(const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);  /* a closed link: EPIPE, never the signal that ends the process */
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 0;
        p += w; n -= (size_t)w;
    }
    return 1;
}

static void stop_device(void) {  /* 'Q': an emulated device exits, and closes the link */
    uint8_t out[PPO_LINK_MAX_FRAME];
    int64_t deadline = now_ms() + 1000;
    if (down || fd < 0) return;  /* nobody to stop */
    if (!send_all(out, ppo_link_encode(out, PPO_LINK_STOP, 0, NULL, 0))) {
        fprintf(stderr, "ppo_link: could not send the stop frame\n");
        return;
    }
    for (;;) {  /* keep the link open until the device closes it: closing first could drop the frame unread */
        struct pollfd p;
        int64_t left = deadline - now_ms();
        p.fd = fd; p.events = POLLIN; p.revents = 0;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0 || read(fd, out, sizeof out) <= 0) return;
    }
}

static int link_down(const char *why) {  /* PPO_LINK_DOWN, said once on stderr */
    if (!down) fprintf(stderr, "ppo_link: %s; the loop's fallback acts from now on\n", why);
    down = 1;
    if (fd >= 0) close(fd);
    fd = -1;
    return PPO_LINK_DOWN;
}

static int link_open(void) {  /* 1 if the link is open */
    const char *path = getenv("PPO_LINK");
    struct sockaddr_un a;
    int tries;
    atexit(write_stats);
    if (!path || strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "ppo_link: set PPO_LINK to the device's Unix socket (a path under %d bytes)\n",
                (int)sizeof a.sun_path);
        link_down("no link to open");
        return 0;
    }
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strcpy(a.sun_path, path);
    for (tries = 0; tries < 200; tries++) {  /* the emulator may still be starting: up to 10 s */
        struct timespec pause = {0, 50000000};
        if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0) break;
        if (!connect(fd, (struct sockaddr *)&a, sizeof a)) break;
        close(fd); fd = -1;
        nanosleep(&pause, NULL);
    }
    if (fd < 0) {
        fprintf(stderr, "ppo_link: cannot connect to %s: %s\n", path, strerror(errno));
        link_down("no link to the device");
        return 0;
    }
    timeout_ms = (int)env_count("PPO_LINK_TIMEOUT_MS", 500);
    corrupt_call = env_count("PPO_LINK_CORRUPT_CALL", -1);
    atexit(stop_device);  /* runs before write_stats: the counters include the stop */
    return 1;
}

static int finite_floats(const uint8_t *p, size_t n) {  /* by their bits: no -ffast-math can fold the test away */
    size_t i;
    for (i = 0; i < n; i++, p += 4) {
        uint32_t b = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if ((b & 0x7F800000u) == 0x7F800000u) return 0;
    }
    return 1;
}

int ppo_policy_act(const float obs[PPO_POLICY_OBS_DIM], float act[PPO_POLICY_ACT_DIM]) {
    static ppo_link_parser rx;
    static uint8_t in[64];
    static ssize_t at, end;  /* received and not parsed yet: in[at:end] */
    uint8_t frame[PPO_LINK_MAX_FRAME], payload[PPO_LINK_OBS_BYTES];
    int64_t deadline;
    size_t n;
    if (!obs || !act) return PPO_POLICY_BAD_ARGUMENT;
    if (down || (fd < 0 && !link_open())) { calls++; return PPO_LINK_DOWN; }
    seq++;
    memcpy(payload, obs, sizeof payload);
    n = ppo_link_encode(frame, PPO_LINK_OBS, seq, payload, (uint8_t)sizeof payload);
    if (calls++ == corrupt_call) frame[5] ^= 0x10u;  /* one bit of the first float, after the checksum */
    if (!send_all(frame, n)) return link_down("the device's link is closed");
    deadline = now_ms() + timeout_ms;
    for (;;) {
        struct pollfd p;
        int64_t left;
        int ready;
        while (at < end) {
            int r = ppo_link_feed(&rx, in[at++]);
            if (r < 0) bad_frames++;
            if (r != 1) continue;
            if (rx.type != PPO_LINK_ACT || rx.seq != seq || rx.len != PPO_LINK_ACT_BYTES) { stale_frames++; continue; }
            answers++;
            if (rx.payload[0] != PPO_POLICY_OK) return rx.payload[0];
            if (!finite_floats(rx.payload + 1, PPO_POLICY_ACT_DIM)) return PPO_POLICY_NONFINITE_ACTION;
            memcpy(act, rx.payload + 1, sizeof(float) * PPO_POLICY_ACT_DIM);
            return PPO_POLICY_OK;
        }
        left = deadline - now_ms();
        p.fd = fd; p.events = POLLIN; p.revents = 0;
        ready = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) return link_down("the link failed");
        if (ready == 0) { timeouts++; return PPO_LINK_TIMEOUT; }
        at = 0;
        end = read(fd, in, sizeof in);
        if (end < 0 && errno == EINTR) { end = 0; continue; }
        if (end <= 0) { end = 0; return link_down("the device closed the link"); }
    }
}
