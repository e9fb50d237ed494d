#include "util/km_err.h"

const char *km_err_str(km_err_t err)
{
    switch (err) {
#define KM_ERR_STR_CASE(name, value, desc)                                                         \
    case name:                                                                                     \
        return desc;
        KM_ERR_MAP(KM_ERR_STR_CASE)
#undef KM_ERR_STR_CASE
    }
    return "unknown error";
}

const char *km_err_name(km_err_t err)
{
    switch (err) {
#define KM_ERR_NAME_CASE(name, value, desc)                                                        \
    case name:                                                                                     \
        return #name;
        KM_ERR_MAP(KM_ERR_NAME_CASE)
#undef KM_ERR_NAME_CASE
    }
    return "KM_ERR_UNKNOWN";
}
