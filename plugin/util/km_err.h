/*
 * km_err.h - the plugin's internal error space (km_err_t). 0 is success, failures are negative.
 * Kafka wire error codes are a different type (int16_t) and are converted only at the RPC
 * boundary.
 */
#ifndef KM_ERR_H
#define KM_ERR_H

/* X(name, value, description) */
#define KM_ERR_MAP(X)                                                                              \
    X(KM_OK, 0, "success")                                                                         \
    X(KM_ERR_NOMEM, -1, "out of memory")                                                           \
    X(KM_ERR_INVALID, -2, "invalid argument")                                                      \
    X(KM_ERR_CONFIG, -3, "invalid configuration")                                                  \
    X(KM_ERR_DISABLED, -4, "the mirror feature is disabled")                                       \
    X(KM_ERR_HOST_API, -5, "the host's kbx API lacks something the plugin needs")                  \
    X(KM_ERR_HOST, -6, "a host call failed")                                                       \
    X(KM_ERR_SHUTDOWN, -7, "shutting down")                                                        \
    X(KM_ERR_LIMIT, -8, "a resource limit was hit (e.g. a regular expression's match limit)")

typedef enum km_err {
#define KM_ERR_ENUM(name, value, desc) name = value,
    KM_ERR_MAP(KM_ERR_ENUM)
#undef KM_ERR_ENUM
} km_err_t;

/**
 * Static description of err ("unknown error" for values not in the table).
 * @thread any
 */
const char *km_err_str(km_err_t err);

/**
 * Static name of err, e.g. "KM_ERR_NOMEM".
 * @thread any
 */
const char *km_err_name(km_err_t err);

#endif /* KM_ERR_H */
