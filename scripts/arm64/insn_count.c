/* A QEMU TCG plugin (user mode) counting guest instructions between two markers the guest
 * makes: getpriority(MARK, 1) starts a count, getpriority(MARK, 2) prints the instructions
 * executed since ("insns N"). The calls fail with EINVAL in the guest, which the caller
 * ignores. Only the few plugin API calls used are declared here (API version 1, QEMU 7.2+).
 * Build: gcc -shared -fPIC -O2 -o insn_count.so insn_count.c
 * Use:   qemu-aarch64 -plugin ./insn_count.so ... (scripts/arm64_check.sh insns)          */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*syscall_cb)(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                           uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                           uint64_t a7, uint64_t a8);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, syscall_cb cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MARK 0x4e5055   /* "NPU" */
#define NR_GETPRIORITY 141  /* aarch64 */

static uint64_t executed, started;

static void on_tb(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed,
                                           qemu_plugin_tb_n_insns(tb));
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8) {
  (void)id; (void)vcpu; (void)a3; (void)a4; (void)a5; (void)a6; (void)a7; (void)a8;
  if (num != NR_GETPRIORITY || a1 != MARK) return;
  if (a2 == 1) {
    started = executed;
  } else if (a2 == 2) {
    char line[64];
    snprintf(line, sizeof line, "insns %" PRIu64 "\n", executed - started);
    qemu_plugin_outs(line);
  }
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info,
                                                               int argc, char **argv) {
  (void)info; (void)argc; (void)argv;
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb);
  qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
  return 0;
}
