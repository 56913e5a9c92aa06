/* startup.c: a Cortex-M4F start for the test program on QEMU's mps2-an386; I/O by semihosting. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
extern int main(void);
extern void initialise_monitor_handles(void);
extern uint32_t __StackTop, __data_load, __data_start, __data_end, __bss_start__, __bss_end__;

void Reset_Handler(void) {
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;  /* CPACR: CP10 and CP11 full access, the FPU on */
    __asm volatile("dsb\n\tisb");
    memcpy(&__data_start, &__data_load, (size_t)((char *)&__data_end - (char *)&__data_start));
    memset(&__bss_start__, 0, (size_t)((char *)&__bss_end__ - (char *)&__bss_start__));
    initialise_monitor_handles();
    exit(main());
}

void _init(void) {}  /* newlib calls these around main; nothing to do here */
void _fini(void) {}

static void Fault_Handler(void) { exit(90); }  /* a fault ends the run with status 90 instead of hanging */

__attribute__((section(".vectors"), used)) static const uintptr_t vectors[16] = {
    (uintptr_t)&__StackTop, (uintptr_t)Reset_Handler, (uintptr_t)Fault_Handler, (uintptr_t)Fault_Handler,
    (uintptr_t)Fault_Handler, (uintptr_t)Fault_Handler, (uintptr_t)Fault_Handler};
