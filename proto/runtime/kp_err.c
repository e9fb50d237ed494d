#include "kp_err.h"

const char *kp_err_str(int err)
{
    switch (err) {
#define KP_ERR_STR_(name, val, desc)                                                               \
    case (val):                                                                                    \
        return desc;
        KP_ERRNO_MAP(KP_ERR_STR_)
#undef KP_ERR_STR_
    }
    return "unknown error";
}

const char *kp_err_name(int err)
{
    switch (err) {
#define KP_ERR_NAME_(name, val, desc)                                                              \
    case (val):                                                                                    \
        return #name;
        KP_ERRNO_MAP(KP_ERR_NAME_)
#undef KP_ERR_NAME_
    }
    return "UNKNOWN";
}
