/* hil_device.c: the policy as a device on an emulated aarch64 Linux (qemu-aarch64): ppo_link.h frames in on
 * stdin, out on stdout. Written by ppo_trt (`ppo-trt c-loop --target aarch64`); do not edit. */
#define _POSIX_C_SOURCE 200112L
#include <stdint.h>
#include <unistd.h>
#include "ppo_policy.h"
#include "ppo_link.h"

static int put(const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(1, p, n);
        if (w <= 0) return 0;
        p += w; n -= (size_t)w;
    }
    return 1;
}

int main(void) {
    static ppo_link_parser rx;
    uint8_t in[256], out[PPO_LINK_MAX_FRAME];
    ssize_t n, i;
    while ((n = read(0, in, sizeof in)) > 0)
        for (i = 0; i < n; i++) {
            if (ppo_link_feed(&rx, in[i]) != 1) continue;
            if (rx.type == PPO_LINK_STOP) return 0;
            if (!put(out, ppo_link_serve(&rx, out))) return 1;
        }
    return 0;
}
