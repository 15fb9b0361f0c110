/* psc_ckpt — reads a stopped ps_server's --checkpoint_dir directly (RocksDB
 * allows one opener: the PS must not be running). A user tool (installed with
 * the programs; README "Tools"), also used by the tests.
 *
 *   psc_ckpt list DIR                     one line per checkpoint, id ascending:
 *                                         "ID step S committed|prepared tensors N bytes B job J good|BAD: why"
 *   psc_ckpt names DIR ID                 checkpoint ID's tensor names, one per line
 *   psc_ckpt keys DIR ID                  RocksDB keys left of checkpoint ID (0 once deleted)
 *   psc_ckpt corrupt DIR ID TENSOR OFFSET flip one byte of a stored tensor (as a bad disk would)
 *
 * Exit: 0, 1 on an error (message on stderr), 64 usage. --help: usage on stdout, 0.
 */
#include "ckpt.h"
#include "psc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psc_ckpt COMMAND DIR [ARGS]\n"
            "Reads a ps_server's --checkpoint_dir (RocksDB) directly; that ps_server must be stopped.\n"
            "commands:\n"
            "  list DIR                      every checkpoint of the store, id ascending, each verified (CRC32C of\n"
            "                                every tensor): \"ID step S committed|prepared tensors N bytes B job J\n"
            "                                good|BAD: why\" (only committed ones count for a restore)\n"
            "  names DIR ID                  the tensor names of checkpoint ID, one a line\n"
            "  keys DIR ID                   how many RocksDB keys checkpoint ID still has (0 once deleted)\n"
            "  corrupt DIR ID TENSOR OFFSET  flip the byte at OFFSET of TENSOR in checkpoint ID, as a bad disk\n"
            "                                would (to try the CRC checks and the fallback to an older checkpoint)\n"
            "  --help                        this text\n"
            "Exit codes: 0 done (list exits 0 even when it reports BAD checkpoints), 1 error (the store cannot be\n"
            "opened: not a store, or a ps_server holds it; no such checkpoint or tensor), 64 usage.\n");
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 3) {
        usage(stderr);
        return 64;
    }
    const char *cmd = argv[1];
    int is_list = !strcmp(cmd, "list") && argc == 3, is_corrupt = !strcmp(cmd, "corrupt") && argc == 6,
        is_keys = !strcmp(cmd, "keys") && argc == 4, is_names = !strcmp(cmd, "names") && argc == 4;
    if (!is_list && !is_corrupt && !is_keys && !is_names) {
        usage(stderr);
        return 64;
    }
    char err[512];
    /* RocksDB would create an empty store where there is none: refuse instead */
    char current[4096];
    snprintf(current, sizeof current, "%s/CURRENT", argv[2]);
    if (access(current, F_OK) != 0) {
        fprintf(stderr, "psc_ckpt: %s is not a checkpoint store (no RocksDB CURRENT file in it)\n", argv[2]);
        return 1;
    }
    ckpt_db_t *db;
    if (ckpt_open(argv[2], &db, err, sizeof err)) {
        fprintf(stderr, "psc_ckpt: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (is_list) {
        ckpt_info_t *infos;
        int n;
        if ((rc = ckpt_list(db, &infos, &n, err, sizeof err)) == 0) {
            for (int i = 0; i < n; i++) {
                char why[512];
                int good = ckpt_verify(db, infos[i].id, why, sizeof why) == 0;
                printf("%llu step %lld %s tensors %u bytes %llu job %s %s%s\n", (unsigned long long)infos[i].id,
                       (long long)infos[i].step, infos[i].committed ? "committed" : "prepared", infos[i].ntensors,
                       (unsigned long long)infos[i].bytes, infos[i].job_id, good ? "good" : "BAD: ", good ? "" : why);
            }
            free(infos);
        }
    } else if (is_corrupt) {
        rc = ckpt_debug_corrupt(db, strtoull(argv[3], NULL, 10), argv[4], strtoll(argv[5], NULL, 10));
        if (rc) snprintf(err, sizeof err, "cannot corrupt %s of checkpoint %s: %s", argv[4], argv[3], psc_strerror(rc));
    } else if (is_names) {
        char **names;
        int n;
        if ((rc = ckpt_names(db, strtoull(argv[3], NULL, 10), &names, &n, err, sizeof err)) == 0) {
            for (int i = 0; i < n; i++) printf("%s\n", names[i]);
            ckpt_free_names(names, n);
        }
    } else {
        printf("%d\n", ckpt_debug_count_keys(db, strtoull(argv[3], NULL, 10)));
    }
    if (rc) fprintf(stderr, "psc_ckpt: %s\n", err);
    ckpt_close(db);
    return rc ? 1 : 0;
}
