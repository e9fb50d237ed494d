/* Compiled with -std=c99 -pedantic-errors: kbx.h must stand alone as C99. */
#include "kbx.h"

int kbx_h_c99_probe(void);

int kbx_h_c99_probe(void)
{
    return (int)sizeof(kbx_api_t) + KBX_ABI_MAJOR;
}
