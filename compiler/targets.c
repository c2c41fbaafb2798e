/* targets.c — the compile targets, made from the registry (compiler/arch.h).
 *
 * One kn_target per architecture: its name and facts from the registry entry, its steps from the
 * table of its ISA (target_host.c, gpu/target_amdgpu.c, gpu/target_nvptx.c); and one
 * "<name>-emu" per AMDGPU entry the emulator runs (emu/target_emu.c's steps with the chip's
 * facts).  Adding a chip of a known ISA adds its targets here without a line of code.
 * The table is built once, on first use, and never changes (targets are kept by address).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "target.h"

enum { MAX_TARGETS = 32 };

static kn_target table[MAX_TARGETS];
static char emu_names[MAX_TARGETS][32];
static int ntargets;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void add(const kn_target *steps, const kn_arch *a, const char *name) {
  if (ntargets == MAX_TARGETS) return;
  kn_target *t = &table[ntargets++];
  *t = *steps;
  t->name = name;
  t->arch = a;
}

static void build(void) {
  for (int i = 0; i < kn_narchs; i++) {
    const kn_arch *a = &kn_archs[i];
    switch (a->isa) {
    case KN_ISA_HOST: add(&kn_target_host, a, a->name); break;
    case KN_ISA_AMDGPU: add(&kn_target_amdgpu_steps, a, a->name); break;
    case KN_ISA_NVPTX: add(&kn_target_nvptx_steps, a, a->name); break;
    }
  }
  /* the emulated targets after the real ones, in registry order */
  for (int i = 0; i < kn_narchs; i++) {
    const kn_arch *a = &kn_archs[i];
    if (a->isa != KN_ISA_AMDGPU || !a->emulated) continue;
    snprintf(emu_names[ntargets], sizeof emu_names[ntargets], "%s-emu", a->name);
    add(&kn_target_emu_steps, a, emu_names[ntargets]);
    table[ntargets - 1].machine = kn_target_host.machine;
  }
}

const kn_target *kn_target_at(int i) {
  pthread_once(&once, build);
  return i >= 0 && i < ntargets ? &table[i] : NULL;
}

const kn_target *kn_target_get(const char *name) {
  pthread_once(&once, build);
  for (int i = 0; name && i < ntargets; i++)
    if (!strcmp(table[i].name, name)) return &table[i];
  return NULL;
}

const kn_target *kn_target_of_arch(const kn_arch *a) {
  pthread_once(&once, build);
  for (int i = 0; a && i < ntargets; i++)
    if (table[i].arch == a && !table[i].emulated) return &table[i];
  return NULL;
}
