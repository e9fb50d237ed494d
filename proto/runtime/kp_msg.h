/*
 * kp_msg.h -- the generic part of the generated message codecs: message descriptors, the API
 * table type, dispatch helpers, and the small runtime helpers the generated code calls
 * (tagged-field sections, checked length-prefixed writes, JSON printing).
 *
 * The per-message types and functions are generated into kp_msgs.h (docs/codec.md).
 *
 * @thread any (no shared state)
 */
#ifndef KP_MSG_H
#define KP_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kp_arena.h"
#include "kp_err.h"
#include "kp_reader.h"
#include "kp_types.h"
#include "kp_writer.h"

/** Printer flag: print `sensitive` fields instead of "<redacted>". */
#define KP_PRINT_UNREDACTED 0x1u

/** kp_api_info_t.flags */
#define KP_API_PROVISIONAL 0x1u /**< the API key is KIP-1279's or ours and may change */
#define KP_API_BROKER      0x2u /**< served on broker listeners */
#define KP_API_CONTROLLER  0x4u /**< served on controller listeners */

/** Describes one generated message type; every function takes the message as void *. */
typedef struct kp_msg_desc_s {
    const char *name;   /**< "FetchRequest", "RequestHeader" */
    int16_t api_key;    /**< -1 for headers */
    int16_t min_ver;    /**< first version */
    int16_t max_ver;    /**< last version */
    int16_t flex_min;   /**< first flexible version, -1 if none */
    uint16_t id;        /**< dense index (0..n-1) over every generated message */
    size_t struct_size; /**< sizeof the message struct */
    void (*init)(void *msg);
    int (*decode)(kp_reader_t *rd, kp_arena_t *ar, void *msg, int16_t ver);
    int (*encode)(kp_writer_t *wr, const void *msg, int16_t ver);
    size_t (*size)(const void *msg, int16_t ver);
    void (*print)(FILE *out, const void *msg, int16_t ver, unsigned flags);
} kp_msg_desc_t;

/** One API of the generated table (kp_apis[], sorted by key). */
typedef struct kp_api_info_s {
    int16_t key;
    const char *name; /**< "Fetch" */
    int16_t min_ver, max_ver;
    int16_t flex_min; /**< -1 = no flexible version */
    uint32_t flags;   /**< KP_API_* */
    const kp_msg_desc_t *req, *resp;
} kp_api_info_t;

/** Reset @p msg to the defaults of every field. */
static inline void kp_msg_init(const kp_msg_desc_t *d, void *msg)
{
    d->init(msg);
}

/** Decode version @p v of the message from @p rd; arrays and unknown tags go to @p ar.
 *  Strings and bytes point into the reader's buffer. Returns 0 or a kp_err_t (also in rd->err).
 *  Does not require the reader to be exhausted. */
static inline int kp_msg_decode(const kp_msg_desc_t *d, kp_reader_t *rd, kp_arena_t *ar, void *msg,
                                int16_t v)
{
    return d->decode(rd, ar, msg, v);
}

/** Append version @p v of @p msg to @p wr. Returns 0 or a kp_err_t (KP_E_FIELD_LOST,
 *  KP_E_NULL_NOT_ALLOWED, KP_E_TOO_LARGE, KP_E_BAD_VERSION, KP_E_BAD_TAGS, writer errors). */
static inline int kp_msg_encode(const kp_msg_desc_t *d, kp_writer_t *wr, const void *msg, int16_t v)
{
    return d->encode(wr, msg, v);
}

/** Exactly the number of bytes kp_msg_encode() writes (when it succeeds). */
static inline size_t kp_msg_size(const kp_msg_desc_t *d, const void *msg, int16_t v)
{
    return d->size(msg, v);
}

/** One-line JSON (docs/codec.md), no newline. */
static inline void kp_msg_print(const kp_msg_desc_t *d, FILE *out, const void *msg, int16_t v,
                                unsigned flags)
{
    d->print(out, msg, v, flags);
}

/* ---- helpers for the generated code (not meant for direct use) ---------------------------- */

/** Read the count of a tagged-field section; fails if it cannot fit in the remaining input. */
uint32_t kp_tags_begin(kp_reader_t *rd);
/** Read one tag header; checks that tags increase (*prev is the previous tag, -1 at first) and
 *  that the value fits; points @p sub at the value and skips it in @p rd. 0 or kp_err_t. */
int kp_tag_next(kp_reader_t *rd, int64_t *prev, uint32_t *tag, kp_reader_t *sub);
/** After a known tag's value was decoded from @p sub: propagate its error, and fail with
 *  KP_E_BAD_TAGS unless it consumed exactly the declared size. */
void kp_tag_done(kp_reader_t *rd, const kp_reader_t *sub);
/** Keep an unknown tag (a view of its bytes) in @p tb; @p left bounds how many may follow. */
void kp_tag_keep(kp_reader_t *rd, kp_arena_t *ar, kp_tagbuf_t *tb, uint32_t left, uint32_t tag,
                 const kp_reader_t *sub);
/** Write the kept unknown tags from index @p i on whose tag is below @p below; returns the next
 *  index. Fails the writer (KP_E_BAD_TAGS) on unsorted tags or a tag equal to @p below. */
uint32_t kp_tags_write_below(kp_writer_t *wr, const kp_tagbuf_t *tb, uint32_t i, uint64_t below);
/** Encoded size of all kept unknown tags (tag, size and value of each). */
size_t kp_tags_size(const kp_tagbuf_t *tb);

/** Checked writes: null where not nullable, negative lengths, over-long strings, NULL data. */
void kp_enc_str(kp_writer_t *wr, kp_str_t s, int compact, int nullable);
void kp_enc_bytes(kp_writer_t *wr, kp_bytes_t b, int compact, int nullable);
/** Writes the count; returns 1 if the caller should write @p cnt elements. */
int kp_enc_arr(kp_writer_t *wr, int32_t cnt, const void *v, int compact, int nullable);

bool kp_uuid_is_zero(const kp_uuid_t *u);
/** s equals the @p len bytes at @p p (a null view equals nothing). */
bool kp_str_eqn(kp_str_t s, const char *p, int32_t len);

/* JSON printing */
void kp_json_str(FILE *out, kp_str_t s);          /**< quoted and escaped, or null */
void kp_json_hex(FILE *out, kp_bytes_t b);        /**< "lowercase hex", or null */
void kp_json_uuid(FILE *out, const kp_uuid_t *u); /**< "32 lowercase hex digits" */
void kp_json_f64(FILE *out, double v);            /**< %.17g; non-finite as "NaN"/"Infinity" */
void kp_json_redacted(FILE *out);

#endif /* KP_MSG_H */
