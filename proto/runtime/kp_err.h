/*
 * kp_err.h -- internal error codes of the protocol runtime (never sent on the wire; the
 * Kafka wire error codes are in the generated kp_msgs.h, KP_ERR_<NAME> int16 constants).
 */
#ifndef KP_ERR_H
#define KP_ERR_H

/* X(name, value, description) */
#define KP_ERRNO_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(TRUNCATED, -1, "input ends before the value does")                                           \
    X(BAD_LENGTH, -2, "a length or count is negative or larger than the input")                    \
    X(TOO_LARGE, -3, "a length or count exceeds the configured maximum")                           \
    X(VARINT, -4, "malformed or over-long varint")                                                 \
    X(NOMEM, -5, "out of memory (or arena limit reached)")                                         \
    X(BAD_VERSION, -6, "version not supported for this message")                                   \
    X(NULL_NOT_ALLOWED, -7, "null value for a field that is not nullable in this version")         \
    X(FIELD_LOST, -8, "a non-default value has no place in this version")                          \
    X(OVERFLOW, -9, "output buffer is full")                                                       \
    X(CORRUPT, -10, "corrupt data (bad CRC, magic, or inconsistent lengths)")                      \
    X(UNSUPPORTED, -11, "unsupported format or codec")                                             \
    X(BAD_TAGS, -12, "tagged fields out of order, duplicated or malformed")                        \
    X(TRAILING, -13, "bytes left over after the value")                                            \
    X(INVALID, -14, "invalid argument")

typedef enum kp_err_e {
#define KP_ERR_ENUM_(name, val, desc) KP_E_##name = (val),
    KP_ERRNO_MAP(KP_ERR_ENUM_)
#undef KP_ERR_ENUM_
} kp_err_t;

/** Static description of @p err ("unknown error" for values outside the table). */
const char *kp_err_str(int err);

/** Symbolic name of @p err without prefix ("TRUNCATED"), or "UNKNOWN". */
const char *kp_err_name(int err);

#endif /* KP_ERR_H */
