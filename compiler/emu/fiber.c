/* fiber.c — user-level context switching for the emulator's lanes.
 *
 * Every lane of an emulated workgroup is a fiber: its own stack, switched to and from by the
 * scheduler (runtime.c) on one OS thread.  A 4-wave workgroup is 256 fibers and attention at
 * (1000, 1000) switches a few million times, so the switch must be cheap: on x86-64 it is a
 * dozen instructions written here in assembly — push the System V callee-saved registers (rbx,
 * rbp, r12-r15) and the SSE / x87 control words, swap stack pointers, pop, return.  Everything
 * else is caller-saved, and a switch only happens inside a call, so the compiler has already
 * saved it.  Elsewhere the fallback is ucontext (correct, slower: swapcontext makes a system call
 * for the signal mask).
 *
 * A new fiber's stack is laid out so the first switch "returns" into a trampoline that calls
 * fn(arg) (arg and fn wait in rbx and r12); fn must never return — the scheduler simply stops
 * switching to a finished fiber.  Stacks come from mmap with a guard page below them, so an
 * overflow faults at once instead of corrupting a neighbour.
 *
 * Under AddressSanitizer (build-asan, KILN_ASAN) every switch is announced to it
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), and a stack is unpoisoned
 * when a fiber is laid on it: ASan otherwise takes a lane's stack for a wild region of the
 * thread's, and a lane ended inside a call (an emulated fault: fail() in runtime.c never
 * returns to it) leaves its frames' poison behind for the next workgroup's lane on that stack,
 * reported as a stack-use-after-scope that never happened.  A stack is unpoisoned again before
 * it is unmapped, for the same reason: its last lanes' frames stay poisoned in ASan's shadow,
 * which outlives the mapping, and whatever is mapped there next (a dlopen'ed library's
 * read-only data) reads as a stack-buffer-underflow — test_aot's AOT launcher did, one run in two.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

/* the switch itself (below, per platform) */
static void fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to);

#ifdef KN_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>

static _Thread_local kn_emu_fiber *switching_from;

/* on the stack just switched to: the switch is over, and its source's stack is now known */
static void switched(void *fake) {
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(fake, &bottom, &size);
  kn_emu_fiber *from = switching_from;
  if (from && !from->stack) from->stack = bottom, from->stack_size = size;
}

void kn_emu_fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to) {
  __sanitizer_start_switch_fiber(&from->fake_stack, to->stack, to->stack_size);
  switching_from = from;
  fiber_switch(from, to);
  switched(from->fake_stack);
}

void kn_emu_fiber_begin(void) { switched(NULL); }

static void fiber_laid(kn_emu_fiber *f, void *stack, size_t size) {
  ASAN_UNPOISON_MEMORY_REGION(stack, size);
  f->stack = stack, f->stack_size = size, f->fake_stack = NULL;
}

static void stack_unmapped(void *stack, size_t size) { ASAN_UNPOISON_MEMORY_REGION(stack, size); }
#else
void kn_emu_fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to) { fiber_switch(from, to); }
void kn_emu_fiber_begin(void) {}
static void fiber_laid(kn_emu_fiber *f, void *stack, size_t size) { (void)f, (void)stack, (void)size; }
static void stack_unmapped(void *stack, size_t size) { (void)stack, (void)size; }
#endif

#if defined(__x86_64__) && !defined(KN_EMU_UCONTEXT)

/* kn_emu_switch_x86(void **save_sp, void *load_sp) */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl kn_emu_switch_x86\n"
        ".hidden kn_emu_switch_x86\n"
        ".type kn_emu_switch_x86, @function\n"
        "kn_emu_switch_x86:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size kn_emu_switch_x86, .-kn_emu_switch_x86\n"
        /* first entry of a fiber: fn(arg); fn never returns */
        ".p2align 4\n"
        ".globl kn_emu_trampoline_x86\n"
        ".hidden kn_emu_trampoline_x86\n"
        ".type kn_emu_trampoline_x86, @function\n"
        "kn_emu_trampoline_x86:\n"
        "  movq %rbx, %rdi\n"
        "  callq *%r12\n"
        "  ud2\n"
        ".size kn_emu_trampoline_x86, .-kn_emu_trampoline_x86\n");

void kn_emu_switch_x86(void **save_sp, void *load_sp);
void kn_emu_trampoline_x86(void);

void kn_emu_fiber_init(kn_emu_fiber *f, void *stack, size_t size, void (*fn)(void *), void *arg) {
  fiber_laid(f, stack, size);
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t *s = (uint64_t *)top;
  /* the first switch pops the registers below and returns into the trampoline with rsp = top
   * (16-aligned), so its call of fn enters fn with rsp = 8 mod 16, as the ABI requires */
  s[-1] = (uint64_t)(uintptr_t)kn_emu_trampoline_x86;
  s[-2] = 0;                                        /* rbp */
  s[-3] = (uint64_t)(uintptr_t)arg;                 /* rbx */
  s[-4] = (uint64_t)(uintptr_t)fn;                  /* r12 */
  s[-5] = 0;                                        /* r13 */
  s[-6] = 0;                                        /* r14 */
  s[-7] = 0;                                        /* r15 */
  uint32_t ctl[2] = {0x1f80u, 0x037fu};             /* default MXCSR, x87 control word */
  memcpy(&s[-8], ctl, 8);
  f->sp = &s[-8];
}

static void fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to) { kn_emu_switch_x86(&from->sp, to->sp); }

#else

void kn_emu_fiber_init(kn_emu_fiber *f, void *stack, size_t size, void (*fn)(void *), void *arg) {
  fiber_laid(f, stack, size);
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack;
  f->uc.uc_stack.ss_size = size;
  f->uc.uc_link = NULL;
  /* makecontext passes int arguments: split the pointers */
  uintptr_t a = (uintptr_t)arg, p = (uintptr_t)fn;
  makecontext(&f->uc, (void (*)(void))kn_emu_fiber_entry, 4, (unsigned)(p >> 32), (unsigned)p,
              (unsigned)(a >> 32), (unsigned)a);
}

void kn_emu_fiber_entry(unsigned fh, unsigned fl, unsigned ah, unsigned al) {
  void (*fn)(void *) = (void (*)(void *))(((uintptr_t)fh << 32) | fl);
  fn((void *)(((uintptr_t)ah << 32) | al));
}

static void fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to) { swapcontext(&from->uc, &to->uc); }

#endif

void *kn_emu_stack_new(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *p = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return NULL;
  mprotect(p, page, PROT_NONE);  /* guard page: the stack grows down into it */
  return (char *)p + page;
}

void kn_emu_stack_free(void *stack, size_t size) {
  if (!stack) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  stack_unmapped(stack, size);
  munmap((char *)stack - page, size + page);
}
