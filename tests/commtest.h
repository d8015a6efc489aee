/* Helpers shared by the multi-rank comm tests: where the rank program is, and whether a
 * zshard shared-memory segment was left in /dev/shm. */
#ifndef ZS_COMMTEST_H
#define ZS_COMMTEST_H

#include "testutil.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

static inline const char *ct_worker(void) {
    static char path[4096];
    const char *d = getenv("ZS_BUILD_DIR");
    snprintf(path, sizeof path, "%s/tests/comm_worker", d ? d : ".");
    return path;
}

/* Number of zshard segments in /dev/shm. Segments live only during setup, so a concurrent
 * test's transient one is waited out (three looks over 0.3 s). */
static inline int ct_shm_leftovers(void) {
    int found = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        found = 0;
        DIR *d = opendir("/dev/shm");
        if (!d) return 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (!strncmp(e->d_name, "zshard-", 7)) found++;
        closedir(d);
        if (!found) return 0;
        usleep(100000);
    }
    return found;
}

/* Count occurrences of needle in hay. */
static inline int ct_count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

#endif
