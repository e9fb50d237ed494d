#include "sto_test.h"
void sto_register_cleaner_tests(void)
{
}
