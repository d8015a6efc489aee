/* Helpers shared by the multi-rank comm tests: where the rank program is, and whether a
 * zshard shared-memory segment was left in /dev/shm. */
#ifndef ZS_COMMTEST_H
#define ZS_COMMTEST_H

#include "testutil.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

/* The rank program: ZS_COMM_WORKER (the gpu suite's build of it), else the build's. */
static inline const char *ct_worker(void) {
    static char path[4096];
    const char *w = getenv("ZS_COMM_WORKER"), *d = getenv("ZS_BUILD_DIR");
    if (w && *w)
        snprintf(path, sizeof path, "%s", w);
    else
        snprintf(path, sizeof path, "%s/tests/comm_worker", d ? d : ".");
    return path;
}

/* Number of this test's zshard segments in /dev/shm. Every job the test starts inherits
 * ZS_JOB_ID=ct<pid>t, which names its segments (zshard-jobct<pid>t-..., or under zshard run
 * zshard-jobct<pid>tx<launcher pid>-...), so tests running in parallel (ctest -j) never see
 * each other's. Segments live only during setup, so a
 * transient one of a job still shutting down is waited out (three looks over 0.3 s). */
static inline int ct_shm_leftovers(void) {
    static char prefix[64];
    if (!prefix[0]) {
        const char *id = getenv("ZS_JOB_ID");
        snprintf(prefix, sizeof prefix, "zshard-job%s", id ? id : "");
    }
    int found = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        found = 0;
        DIR *d = opendir("/dev/shm");
        if (!d) return 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (!strncmp(e->d_name, prefix, strlen(prefix))) found++;
        closedir(d);
        if (!found) return 0;
        usleep(100000);
    }
    return found;
}

/* Give every job this test starts a job id of its own (see ct_shm_leftovers). */
static inline void ct_job_scope(void) {
    char id[32];
    snprintf(id, sizeof id, "ct%ldt", (long)getpid());
    setenv("ZS_JOB_ID", id, 1);
}

/* Count occurrences of needle in hay. */
static inline int ct_count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* comm_worker split-die --group 2 --victim 2 among 4 ranks (comm_worker_split.c): every
 * survivor fails, the launcher names rank 2, and the two survivors that share a group with it
 * name it as that group's rank 0, which their reports map to job rank 2. */
static inline void ct_split_die_check(const char *out) {
    ZT_CHECK(ct_count(out, "FAILED ZS_ERR_COMM") == 3, "every survivor must fail:\n%s", out);
    ZT_CHECK(strstr(out, "zshard run: rank 2 (pid ") && strstr(out, "killed by signal 9"),
             "the launcher does not name rank 2 and SIGKILL:\n%s", out);
    static const char *who[2][2] = {
        {"on rank 1 of group 1 (its ranks 0, 1 are job ranks 2, 3): peer rank 0 ",
         "on rank 1 of group 1 (its ranks 0, 1 are job ranks 2, 3): gloo: lost peer rank 0 "},
        {"on rank 1 of group 0 (its ranks 0, 1 are job ranks 2, 0): peer rank 0 ",
         "on rank 1 of group 0 (its ranks 0, 1 are job ranks 2, 0): gloo: lost peer rank 0 "}};
    for (int k = 0; k < 2; k++)
        ZT_CHECK(strstr(out, who[k][0]) || strstr(out, who[k][1]),
                 "job rank %d (a group with rank 2) does not name its dead peer:\n%s", k ? 0 : 3,
                 out);
}

#endif
