/* zshard tokenize and eval on text, through the command: the exit codes and summary of
 * `zshard tokenize` (counts of skipped documents, --exclude, a second run into a full folder,
 * --strict, inputs and tokenizers that are not there, bad flags); SIGINT and SIGTERM mid-run
 * (the shards removed, no dataset.json, exit 128 + the signal); output folders inside the
 * inputs and --overwrite that never deletes an input; `eval --data TEXT --tokenizer` against
 * eval on the shards tokenize writes. The corpora and the identity tokenizer are
 * tokenize_fixture.c's. */
#include "testutil.h"
#include "tokenize_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the CLI ------------------------------------------------------------------------------- */

static void test_cli(void) {
    static char buf[1 << 16];
    const char *z = zt_zshard_exe();
    int rc = zt_runf(buf, sizeof buf,
                     "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                     "--threads 2",
                     z, tk_path("t1"), tk_path("ident"), tk_path("c1"));
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "skipped 3 documents (empty 2, binary_file 1)") &&
                 strstr(buf, "a.txt:5: empty (only white space)") &&
                 strstr(buf, "invalid UTF-8 replaced 3"),
             "summary (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                 "--exclude '*.bin' --quiet",
                 z, tk_path("t1"), tk_path("ident"), tk_path("c0"));
    ZT_CHECK(rc == 0 && strstr(buf, "read 2 files") && strstr(buf, "skipped 2 documents (empty 2)"),
             "--exclude '*.bin' (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --doc-sep %%", z,
                 tk_path("t1"), tk_path("ident"), tk_path("c1"));
    ZT_CHECK(rc == 1 && strstr(buf, "already holds") && strstr(buf, "--overwrite"),
             "a second run into the same folder (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --strict", z,
                 tk_path("d.jsonl"), tk_path("ident"), tk_path("c2"));
    ZT_CHECK(rc == 1 && strstr(buf, "d.jsonl:4: missing_field: no field 'text' (--strict)"),
             "strict jsonl (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s", z,
                 tk_path("nothing/here*.txt"), tk_path("ident"), tk_path("c3"));
    ZT_CHECK(rc == 1 && strstr(buf, "matches no file"), "no match (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s", z, tk_path("t1"),
                 tk_path("absent"), tk_path("c4"));
    ZT_CHECK(rc == 1 && strstr(buf, "absent"), "missing tokenizer (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --tokenizer %s --out %s --val-frac 2", z,
                 tk_path("t1"), tk_path("ident"), tk_path("c5"));
    ZT_CHECK(rc == 2 && strstr(buf, "--val-frac"), "bad flag (rc %d): %s", rc, buf);
    rc = zt_runf(buf, sizeof buf, "%s tokenize %s --out %s", z, tk_path("t1"), tk_path("c6"));
    ZT_CHECK(rc == 2 && strstr(buf, "--tokenizer"), "no tokenizer (rc %d): %s", rc, buf);
}

/* tokenize stopped by SIGINT or SIGTERM removes the shards it wrote, writes no
 * dataset.json, says so, and exits 128 + the signal. ZS_FAULT_HOLD_SHARDS=3 holds the job after
 * the batch that begins its third shard (as a stalled input would), so the signal always comes
 * mid-run. */
static void test_interrupt(void) {
    static char buf[1 << 16];
    FILE *f = fopen(tk_path("intr.txt"), "w");
    ZT_REQUIRE(f, "create intr.txt");
    for (int d = 0; d < 400; d++)
        fprintf(f, "document %d of the interrupted run, with a few words\n%%\n", d);
    fclose(f);
    const int sigs[] = {2, 15};
    const char *names[] = {"SIGINT", "SIGTERM"};
    for (int k = 0; k < 2; k++) {
        char out[64], want[64], said[64];
        snprintf(out, sizeof out, "intr_out%d", k);
        int rc = zt_runf(
            buf, sizeof buf,
            "cd %s && rm -rf %s && { ZS_FAULT_HOLD_SHARDS=3 %s tokenize intr.txt "
            "--doc-sep %% --tokenizer %s --out %s --shard-size 50 --threads 1 > intr%d.log 2>&1 "
            "& } ; p=$!; i=0; while [ ! -e %s/train_000001.bin ] && [ $i -lt 3000 ]; do "
            "sleep 0.01; i=$((i+1)); done; ls %s > before%d.txt; kill -%d $p; wait $p; "
            "echo \"rc=$?\"; cat intr%d.log; echo \"shards before: $(wc -l < before%d.txt)\"; "
            "echo \"left: [$(ls -A %s)]\"",
            tk_dir(), out, zt_zshard_exe(), tk_path("ident"), out, k, out, out, k, sigs[k], k, k,
            out);
        snprintf(want, sizeof want, "rc=%d", 128 + sigs[k]);
        snprintf(said, sizeof said, "interrupted by %s: removed the ", names[k]);
        ZT_CHECK(rc == 0 && strstr(buf, want) && strstr(buf, said) &&
                     strstr(buf, "wrote no dataset.json") && strstr(buf, "left: []") &&
                     !strstr(buf, "shards before: 0"),
                 "tokenize stopped by %s: want %s, its message, and an empty output folder:\n%s",
                 names[k], want, buf);
    }
}

/* an output folder inside the input folder, and earlier
 * runs' token folders, are left out of the inputs with a note (never tokenized as text);
 * --overwrite never deletes an input; nothing kept is an error; a validation-only set and a
 * bad --eos are said once, without a doubled prefix. */
static void test_output_in_input(void) {
    static char buf[1 << 16];
    char cmd[4096];
    const char *z = zt_zshard_exe(), *tok = tk_path("ident");
    ZT_REQUIRE(system("true") == 0, "sh");
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/nest && cd %s/nest && for i in 1 2 3 4 5 6; do "
             "printf 'document %%s of the nest\n%%%%\n' $i; done > a.txt",
             tk_dir(), tk_dir());
    ZT_REQUIRE(system(cmd) == 0, "%s", cmd);
    int rc = zt_runf(buf, sizeof buf,
                     "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                     "--out nest/tok --val-frac 0",
                     tk_dir(), z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents"), "first run (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                 "--out nest/tok2 --val-frac 0",
                 tk_dir(), z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "note: left out nest/tok (token shards: it holds a zshard "
                             "dataset.json)"),
             "a second output folder beside the first: the first is not an input (rc %d):\n%s", rc,
             buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest --doc-sep %% --tokenizer %s "
                 "--out nest/tok --val-frac 0 --overwrite && test -f nest/tok/dataset.json",
                 tk_dir(), z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "tokenize: 6 documents") &&
                 strstr(buf, "note: left out nest/tok (the output folder)"),
             "--overwrite of an output folder inside the inputs (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest/tok/dataset.json nest/a.txt "
                 "--doc-sep %% --tokenizer %s --out nest/tok --overwrite 2>&1; echo \"rc=$?\"; "
                 "test -f nest/tok/dataset.json && test -f nest/tok/train_000000.bin && "
                 "echo kept",
                 tk_dir(), z, tok);
    ZT_CHECK(strstr(buf, "rc=1") &&
                 strstr(buf, "the input nest/tok/dataset.json is an earlier output in --out "
                             "nest/tok, which this run would delete (--overwrite)") &&
                 strstr(buf, "kept") && !strstr(buf, "tokenize: tokenize:"),
             "--overwrite must not delete an input:\n%s", buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest/a.txt --doc-sep %% --tokenizer %s "
                 "--out nest_none --max-doc-bytes 4",
                 tk_dir(), z, tok);
    ZT_CHECK(rc == 1 && strstr(buf, "none of the 6 documents read was kept (the first: "
                                    "nest/a.txt:1: too_long"),
             "nothing kept (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest/a.txt --doc-sep %% --tokenizer %s "
                 "--out nest_val --val-frac 1",
                 tk_dir(), z, tok);
    ZT_CHECK(rc == 0 && strstr(buf, "note: no document went to train (--val-frac 1)"),
             "validation-only (rc %d):\n%s", rc, buf);
    rc = zt_runf(buf, sizeof buf,
                 "cd %s && %s tokenize nest/a.txt --tokenizer %s --out nest_e "
                 "--eos nope",
                 tk_dir(), z, tok);
    ZT_CHECK(rc == 1 && strstr(buf, "zshard: tokenize: --eos 'nope' is not a token") &&
                 !strstr(buf, "tokenize: tokenize:"),
             "--eos that is no token: one prefix (rc %d):\n%s", rc, buf);
}

/* eval --data TEXT --tokenizer: the same loss as eval on the shards `zshard tokenize` writes
 * from that text (all documents in one split), at 1 and 2 ranks. */
static void test_eval_text(void) {
    static char buf[1 << 16], a[512];
    const char *z = zt_zshard_exe();
    int rc = zt_runf(buf, sizeof buf,
                     "%s tokenize %s --tokenizer %s --out %s --doc-sep %% "
                     "--val-frac 0 --quiet",
                     z, tk_path("th"), tk_path("ident"), tk_path("ev"));
    ZT_REQUIRE(rc == 0, "tokenize: %s", buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s train --model gpt2-tiny --data '%s/train_*.bin' --vocab 257 "
                 "--batch 4 --seq 32 --steps 3 --sample-len 0 --quiet "
                 "--save-dir %s",
                 z, tk_path("ev"), tk_path("ev-ck"));
    ZT_REQUIRE(rc == 0, "train: %s", buf);
    rc = zt_runf(buf, sizeof buf,
                 "%s eval %s --data '%s/train_*.bin' --split all --batches 6 "
                 "--json",
                 z, tk_path("ev-ck"), tk_path("ev"));
    snprintf(a, sizeof a, "%.*s", (int)strcspn(buf, ","), buf);
    ZT_CHECK(rc == 0 && strstr(a, "\"loss\":"), "eval on shards: %s", buf);
    const char *tail[] = {"", " --nproc 2 --stage 3"};
    for (int k = 0; k < 2; k++) {
        rc = zt_runf(buf, sizeof buf,
                     "%s eval %s --data %s --tokenizer %s --doc-sep %% "
                     "--split all --batches 6 --json%s 2>/dev/null",
                     z, tk_path("ev-ck"), tk_path("th"), tk_path("ident"), tail[k]);
        const char *j = strstr(buf, "{\"loss\"");
        ZT_CHECK(rc == 0 && j && !strncmp(j, a, strlen(a)),
                 "eval --tokenizer%s: %s, want the loss of %s", tail[k], buf, a);
    }
    /* --field reads JSONL for the tokenizer; without one there is nothing to read it for
     * (--doc-sep alone is byte-level text's document rule, as train's). */
    rc = zt_runf(buf, sizeof buf, "%s eval %s --data %s --field text", z, tk_path("ev-ck"),
                 tk_path("th"));
    ZT_CHECK(rc == 2 && strstr(buf, "--field applies with --tokenizer"),
             "--field without --tokenizer: %s", buf);
    /* a tokenizer of another vocabulary than the model's: named, not the temporary shards */
    rc = zt_runf(buf, sizeof buf,
                 "%s train --model gpt2-tiny --data %s --batch 2 --seq 16 --steps 1 "
                 "--sample-len 0 --val-every 0 --quiet --save-dir %s",
                 z, tk_path("intr.txt"), tk_path("ev-bytes"));
    ZT_REQUIRE(rc == 0, "byte-level train: %s", buf);
    rc = zt_runf(buf, sizeof buf, "%s eval %s --data %s --tokenizer %s --doc-sep %% 2>&1", z,
                 tk_path("ev-bytes"), tk_path("intr.txt"), tk_path("ident"));
    ZT_CHECK(rc == 1 && strstr(buf, "has 257 ids and the model of") &&
                 strstr(buf, "not the tokenizer the model was trained with") &&
                 !strstr(buf, "dataset.json"),
             "eval with another tokenizer: %s", buf);
}
int main(void) {
    zt_init("tokenize_cli");
    tk_begin("tokenize_cli");
    tk_write_t1();
    tk_write_jsonl();
    tk_write_th();
    test_cli();
    test_interrupt();
    test_output_in_input();
    test_eval_text();
    return tk_end(zt_finish());
}
