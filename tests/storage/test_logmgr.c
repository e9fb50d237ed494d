#include "sto_test.h"
void sto_register_mgr_tests(void)
{
}
