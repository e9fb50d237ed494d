#include "kb_err.h"

const char *kb_err_str(int err)
{
    switch (err) {
#define KB_ERR_STR_(name, val, desc)                                                               \
    case (val):                                                                                    \
        return desc;
        KB_ERRNO_MAP(KB_ERR_STR_)
#undef KB_ERR_STR_
    }
    return "unknown error";
}

const char *kb_err_name(int err)
{
    switch (err) {
#define KB_ERR_NAME_(name, val, desc)                                                              \
    case (val):                                                                                    \
        return #name;
        KB_ERRNO_MAP(KB_ERR_NAME_)
#undef KB_ERR_NAME_
    }
    return "UNKNOWN";
}
