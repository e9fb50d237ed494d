#include "sto_test.h"
void sto_register_recovery_tests(void)
{
}
