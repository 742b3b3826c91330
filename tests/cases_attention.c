/* placeholder: being written */
#include "cases.h"
const gc_case cases_attention[] = {{0}};
const int n_cases_attention = 0;
