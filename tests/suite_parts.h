/* Suites spread over several files, one sub-area a file: each part adds its
 * test cases to the suite that the test_<area>.c beside it builds and runs
 * (tests/meson.build compiles the parts into that program). */
#ifndef TG_SUITE_PARTS_H
#define TG_SUITE_PARTS_H

#include <check.h>

/* misuse: test_misuse.c (scopes, versions, released tensors) */
void misuse_bad_input_cases(Suite *s);
void misuse_robustness_cases(Suite *s);
/* modules: test_modules.c (parameter lists, Linear, LayerNorm, Embedding) */
void modules_written_with_module_h_cases(Suite *s);
/* optim: test_optim.c (the built-in optimizers, clipping, the schedule) */
void optim_written_with_module_h_cases(Suite *s);

#endif
