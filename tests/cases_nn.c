/* placeholder: being written */
#include "cases.h"
const gc_case cases_nn[] = {{0}};
const int n_cases_nn = 0;
