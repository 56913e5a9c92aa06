/* ppo_link.h: the serial link between a control loop (the host) and the device that runs the policy.
 * Written by ppo_trt (`ppo-trt c-loop --target`); do not edit. Header-only C99; allocates nothing.
 *
 * A frame: 0xA5 0x5A, type, sequence number, payload length, the payload, then the CRC-16/CCITT-FALSE (polynomial
 * 0x1021, initial 0xFFFF) of type, sequence, length and payload, low byte first. Floats travel as IEEE-754 binary32,
 * little-endian (x86-64, aarch64 and Cortex-M all are).
 *   host -> device  'O': an observation, PPO_POLICY_OBS_DIM floats    'K': which kernel?    'Q': stop (emulation)
 *   device -> host  'A': the answer to the 'O' of the same sequence number: ppo_policy_act's status (one byte),
 *                        then PPO_POLICY_ACT_DIM floats (zeros unless the status is PPO_POLICY_OK)
 *                   'K': ppo_policy_kernel()'s text
 * A frame whose checksum fails is dropped without an answer: the host's timeout engages its fallback. */
#ifndef PPO_LINK_H
#define PPO_LINK_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "ppo_policy.h"

/* The host's ppo_policy_act (ppo_link_host.c) returns the library's statuses and these two; on either, `act` is
 * untouched and the loop's fallback acts. */
#define PPO_LINK_TIMEOUT 16  /* no valid answer within PPO_LINK_TIMEOUT_MS */
#define PPO_LINK_DOWN 17     /* the link is closed or broken, or could not be opened: every later call returns it */

#define PPO_LINK_SYNC0 0xA5u
#define PPO_LINK_SYNC1 0x5Au
#define PPO_LINK_OBS 'O'
#define PPO_LINK_ACT 'A'
#define PPO_LINK_KERNEL 'K'
#define PPO_LINK_STOP 'Q'
#define PPO_LINK_OBS_BYTES (4 * PPO_POLICY_OBS_DIM)
#define PPO_LINK_ACT_BYTES (1 + 4 * PPO_POLICY_ACT_DIM)
#define PPO_LINK_MAX_PAYLOAD (PPO_LINK_OBS_BYTES > 32 ? PPO_LINK_OBS_BYTES : 32)
#define PPO_LINK_MAX_FRAME (7 + PPO_LINK_MAX_PAYLOAD)
#if PPO_LINK_MAX_PAYLOAD > 255 || PPO_LINK_ACT_BYTES > PPO_LINK_MAX_PAYLOAD
#error "a frame's payload length is one byte: this policy's observation or action is too wide for the link"
#endif

static inline uint16_t ppo_link_crc(const uint8_t *p, size_t n, uint16_t crc) {
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000u ? ((unsigned)crc << 1) ^ 0x1021u : (unsigned)crc << 1);
    }
    return crc;
}

/* Write the frame (type, seq, payload) into out[PPO_LINK_MAX_FRAME]; its length. */
static inline size_t ppo_link_encode(uint8_t *out, uint8_t type, uint8_t seq, const uint8_t *payload, uint8_t len) {
    uint16_t crc;
    out[0] = PPO_LINK_SYNC0; out[1] = PPO_LINK_SYNC1; out[2] = type; out[3] = seq; out[4] = len;
    if (len) memcpy(out + 5, payload, len);
    crc = ppo_link_crc(out + 2, (size_t)len + 3, 0xFFFFu);
    out[5 + len] = (uint8_t)(crc & 0xFFu); out[6 + len] = (uint8_t)(crc >> 8);
    return (size_t)len + 7;
}

typedef struct {
    int state;  /* 0, 1: the sync bytes; 2: type; 3: sequence; 4: length; 5: payload; 6, 7: checksum */
    uint8_t type, seq, len;
    uint8_t payload[PPO_LINK_MAX_PAYLOAD];
    size_t got;
    uint16_t crc;
} ppo_link_parser;

/* One received byte: 1 when a whole frame with a good checksum is in `p`, -1 when a frame failed its checksum (or
 * announced a payload longer than any frame's), 0 otherwise. Bytes between frames are skipped. */
static inline int ppo_link_feed(ppo_link_parser *p, uint8_t byte) {
    switch (p->state) {
    case 0: p->state = byte == PPO_LINK_SYNC0; return 0;
    case 1: p->state = byte == PPO_LINK_SYNC1 ? 2 : byte == PPO_LINK_SYNC0; return 0;
    case 2: p->type = byte; p->state = 3; return 0;
    case 3: p->seq = byte; p->state = 4; return 0;
    case 4:
        p->len = byte; p->got = 0;
        if (byte > PPO_LINK_MAX_PAYLOAD) { p->state = 0; return -1; }
        p->state = byte ? 5 : 6;
        return 0;
    case 5:
        p->payload[p->got++] = byte;
        if (p->got == p->len) p->state = 6;
        return 0;
    case 6: p->crc = byte; p->state = 7; return 0;
    default: {
        uint8_t head[3];
        head[0] = p->type; head[1] = p->seq; head[2] = p->len;
        p->crc |= (uint16_t)(byte << 8);
        p->state = 0;
        return p->crc == ppo_link_crc(p->payload, p->len, ppo_link_crc(head, 3, 0xFFFFu)) ? 1 : -1;
    }
    }
}

/* The device's side: the answer to the good frame in `p` written into out[PPO_LINK_MAX_FRAME]; its length, 0 for
 * none. An 'O' frame of the wrong length is answered PPO_POLICY_BAD_ARGUMENT. */
static inline size_t ppo_link_serve(const ppo_link_parser *p, uint8_t *out) {
    float obs[PPO_POLICY_OBS_DIM], act[PPO_POLICY_ACT_DIM];
    uint8_t reply[PPO_LINK_ACT_BYTES];
    int status;
    if (p->type == PPO_LINK_KERNEL) {
        const char *k = ppo_policy_kernel();
        return ppo_link_encode(out, PPO_LINK_KERNEL, p->seq, (const uint8_t *)k, (uint8_t)strlen(k));
    }
    if (p->type != PPO_LINK_OBS) return 0;
    memset(act, 0, sizeof act);
    if (p->len != PPO_LINK_OBS_BYTES) status = PPO_POLICY_BAD_ARGUMENT;
    else { memcpy(obs, p->payload, sizeof obs); status = ppo_policy_act(obs, act); }
    if (status != PPO_POLICY_OK) memset(act, 0, sizeof act);
    reply[0] = (uint8_t)status;
    memcpy(reply + 1, act, sizeof act);
    return ppo_link_encode(out, PPO_LINK_ACT, p->seq, reply, (uint8_t)sizeof reply);
}
#endif
