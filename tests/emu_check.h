/* The emulated GPU's own tests (test_emu_profile.cc, test_emu_cublaslt.cc), written in C++
 * against the emulator's headers rather than testutil.h: a check that counts, and prints the
 * failing line with its message. */
#ifndef ZS_TESTS_EMU_CHECK_H
#define ZS_TESTS_EMU_CHECK_H

#include <stdio.h>

static int g_fail, g_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            g_fail++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#endif
