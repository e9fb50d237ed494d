/*
 * kb_err.h -- internal error codes of kbroker (never sent on the wire; Kafka wire error codes
 * are int16 KP_ERR_<NAME> values from the protocol codec). 0 is success, failures are negative.
 */
#ifndef KB_ERR_H
#define KB_ERR_H

/* X(name, value, description) */
#define KB_ERRNO_MAP(X)                                                                            \
    X(OK, 0, "success")                                                                            \
    X(NOMEM, -1, "out of memory")                                                                  \
    X(INVALID, -2, "invalid argument")                                                             \
    X(CANCELLED, -3, "cancelled (the client went away)")                                           \
    X(IO, -4, "I/O error")                                                                         \
    X(CLOSED, -5, "closed or shutting down")                                                       \
    X(EXISTS, -6, "already exists")                                                                \
    X(NOT_FOUND, -7, "not found")                                                                  \
    X(RANGE, -8, "value out of range")                                                             \
    X(STATE, -9, "operation not valid in the current state")                                       \
    X(TIMEOUT, -10, "timed out")                                                                   \
    X(PARSE, -11, "malformed input")                                                               \
    X(UNSUPPORTED, -12, "not supported")

typedef enum kb_err_e {
#define KB_ERR_ENUM_(name, val, desc) KB_E_##name = (val),
    KB_ERRNO_MAP(KB_ERR_ENUM_)
#undef KB_ERR_ENUM_
} kb_err_t;

/** Static description of @p err ("unknown error" outside the table). @thread any */
const char *kb_err_str(int err);

/** Symbolic name without prefix ("CANCELLED"), or "UNKNOWN". @thread any */
const char *kb_err_name(int err);

#endif /* KB_ERR_H */
