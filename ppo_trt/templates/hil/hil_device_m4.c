/* hil_device.c: the policy as a device on QEMU's mps2-an386 (Cortex-M4F): ppo_link.h frames in and out over
 * UART0, the CMSDK APB UART that QEMU connects to its first -serial. Written by ppo_trt (`ppo-trt c-loop --target
 * cortex-m4f`); do not edit. */
#include <stdint.h>
#include "ppo_policy.h"
#include "ppo_link.h"

#define UART0 0x40004000u
#define UART_DATA (*(volatile uint32_t *)(UART0 + 0x00u))
#define UART_STATE (*(volatile uint32_t *)(UART0 + 0x04u))      /* bit 0: TX full, bit 1: RX full */
#define UART_CTRL (*(volatile uint32_t *)(UART0 + 0x08u))       /* bits 0, 1: TX, RX enabled; bit 3: RX interrupt */
#define UART_INTSTATUS (*(volatile uint32_t *)(UART0 + 0x0Cu))  /* bit 1: RX; write 1 to clear */
#define UART_BAUDDIV (*(volatile uint32_t *)(UART0 + 0x10u))
#define NVIC_ISER0 (*(volatile uint32_t *)0xE000E100u)
#define NVIC_ICPR0 (*(volatile uint32_t *)0xE000E280u)
#define UART0_RX_IRQ 0u  /* mps2-an386: UART0's receive interrupt is IRQ 0 */

/* The next byte, asleep (WFI) until it comes. Interrupts stay masked (PRIMASK): the pending receive interrupt only
 * wakes the core, and is cleared once the byte is read. */
static uint8_t uart_get(void) {
    uint8_t b;
    while (!(UART_STATE & 2u)) __asm volatile("wfi");
    b = (uint8_t)UART_DATA;
    UART_INTSTATUS = 2u;
    NVIC_ICPR0 = 1u << UART0_RX_IRQ;
    return b;
}

static void uart_put(const uint8_t *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        while (UART_STATE & 1u) {}
        UART_DATA = p[i];
    }
}

int main(void) {
    static ppo_link_parser rx;
    uint8_t out[PPO_LINK_MAX_FRAME];
    __asm volatile("cpsid i");
    UART_BAUDDIV = 217u;  /* 25 MHz / 115200 (QEMU's model does not pace the bytes) */
    UART_CTRL = 1u | 2u | 8u;
    NVIC_ISER0 = 1u << UART0_RX_IRQ;
    for (;;) {
        if (ppo_link_feed(&rx, uart_get()) != 1) continue;
        if (rx.type == PPO_LINK_STOP) return 0;
        uart_put(out, ppo_link_serve(&rx, out));
    }
}
