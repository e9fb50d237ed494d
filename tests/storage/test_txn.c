#include "sto_test.h"
void sto_register_txn_tests(void)
{
}
