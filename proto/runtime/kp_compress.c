#include "kp_compress.h"

#include <stdlib.h>
#include <string.h>

#define LZ4F_STATIC_LINKING_ONLY /* LZ4F_CustomMem and the _advanced constructors */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_customMem and the _advanced constructors */
#include <lz4frame.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

/* Output is produced in steps of at most this many bytes, so a decompression bomb never makes
 * us reserve more than the cap plus one step. */
#define KP_DECOMP_STEP (64 * 1024)

#define KP_GZIP_LEVEL_DEFAULT 6
#define KP_LZ4_LEVEL_DEFAULT  9
#define KP_ZSTD_LEVEL_DEFAULT 3
#define KP_LZ4_LEVEL_MAX      17

static const kp_alloc_t kp_compress_default_alloc;

const char *kp_codec_name(int codec)
{
    switch (codec) {
    case KP_CODEC_NONE:
        return "none";
    case KP_CODEC_GZIP:
        return "gzip";
    case KP_CODEC_SNAPPY:
        return "snappy";
    case KP_CODEC_LZ4:
        return "lz4";
    case KP_CODEC_ZSTD:
        return "zstd";
    default:
        return "unknown";
    }
}

bool kp_codec_valid(int codec)
{
    return codec >= KP_CODEC_NONE && codec <= KP_CODEC_MAX;
}

/* ---- allocator glue ---------------------------------------------------------------------- */

static void *kp_alloc_call(const kp_alloc_t *al, size_t n)
{
    if (al && al->alloc)
        return al->alloc(al->opaque, n);
    return malloc(n);
}

static void kp_free_call(const kp_alloc_t *al, void *p)
{
    if (al && al->free)
        al->free(al->opaque, p);
    else
        free(p);
}

static voidpf kp_compress_zalloc(voidpf opaque, uInt items, uInt size)
{
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return kp_alloc_call(opaque, (size_t)items * size);
}

static void kp_compress_zfree(voidpf opaque, voidpf p)
{
    kp_free_call(opaque, p);
}

static void *kp_compress_zstd_alloc(void *opaque, size_t n)
{
    return kp_alloc_call(opaque, n);
}

static void kp_compress_zstd_free(void *opaque, void *p)
{
    kp_free_call(opaque, p);
}

static ZSTD_customMem kp_compress_zstd_mem(const kp_alloc_t *al)
{
    ZSTD_customMem cm = {kp_compress_zstd_alloc, kp_compress_zstd_free, (void *)al};
    return cm;
}

static LZ4F_CustomMem kp_compress_lz4_mem(const kp_alloc_t *al)
{
    LZ4F_CustomMem cm = {kp_compress_zstd_alloc, NULL, kp_compress_zstd_free, (void *)al};
    return cm;
}

/* ---- compression ------------------------------------------------------------------------- */

static int kp_compress_gzip(const uint8_t *in, size_t in_len, kp_writer_t *out, int level,
                            const kp_alloc_t *al)
{
    z_stream zs;
    int zr, rc = 0;

    if (level == KP_COMPRESS_LEVEL_DEFAULT)
        level = KP_GZIP_LEVEL_DEFAULT;
    if (level < 1 || level > 9)
        return KP_E_INVALID;
    memset(&zs, 0, sizeof(zs));
    zs.zalloc = kp_compress_zalloc;
    zs.zfree = kp_compress_zfree;
    zs.opaque = (voidpf)al;
    /* windowBits 16 + 15: write a gzip header and trailer, as java.util.zip.GZIPOutputStream. */
    zr = deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    if (zr != Z_OK)
        return zr == Z_MEM_ERROR ? KP_E_NOMEM : KP_E_INVALID;
    zs.next_in = (Bytef *)(uintptr_t)in;
    for (;;) {
        size_t room;
        size_t in_step = in_len > UINT_MAX ? UINT_MAX : in_len;
        /* deflateBound() covers the whole remaining input; cap steps to keep uInt happy. */
        room = deflateBound(&zs, (uLong)in_step) + 64;
        if (room > UINT_MAX)
            room = UINT_MAX;
        if (out->fixed && room > out->cap - out->len)
            room = out->cap - out->len;
        if (room == 0 || kp_writer_reserve(out, room)) {
            rc = out->err ? out->err : (out->err = KP_E_OVERFLOW);
            break;
        }
        zs.avail_in = (uInt)in_step;
        zs.next_out = out->buf + out->len;
        zs.avail_out = (uInt)room;
        zr = deflate(&zs, in_step == in_len ? Z_FINISH : Z_NO_FLUSH);
        out->len += room - zs.avail_out;
        in_len -= in_step - zs.avail_in;
        if (zr == Z_STREAM_END)
            break;
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = KP_E_NOMEM;
            break;
        }
    }
    deflateEnd(&zs);
    return rc;
}

static int kp_compress_snappy(const uint8_t *in, size_t in_len, kp_writer_t *out)
{
    size_t at;

    kp_write_raw(out, KP_SNAPPY_XERIAL_MAGIC, 8);
    kp_write_int32(out, 1); /* stream format version */
    kp_write_int32(out, 1); /* minimum compatible version */
    while (in_len > 0 && !out->err) {
        size_t n = in_len > KP_SNAPPY_XERIAL_BLOCK_MAX ? KP_SNAPPY_XERIAL_BLOCK_MAX : in_len;
        size_t clen = snappy_max_compressed_length(n);

        at = out->len;
        if (kp_writer_reserve(out, 4 + clen))
            break;
        if (snappy_compress((const char *)in, n, (char *)out->buf + at + 4, &clen) != SNAPPY_OK)
            return KP_E_NOMEM;
        out->len = at + 4;
        kp_writer_patch_int32(out, at, (int32_t)clen);
        out->len += clen;
        in += n;
        in_len -= n;
    }
    return out->err;
}

static int kp_compress_lz4(const uint8_t *in, size_t in_len, kp_writer_t *out, int level,
                           const kp_alloc_t *al)
{
    LZ4F_preferences_t prefs;
    LZ4F_cctx *cctx;
    size_t bound, n;

    if (level == KP_COMPRESS_LEVEL_DEFAULT)
        level = KP_LZ4_LEVEL_DEFAULT;
    /* Kafka's lz4 range is 1-17 (lz4-java's); liblz4 treats levels above its HC maximum (12)
     * as that maximum. */
    if (level < 1 || level > KP_LZ4_LEVEL_MAX)
        return KP_E_INVALID;
    memset(&prefs, 0, sizeof(prefs));
    prefs.frameInfo.blockSizeID = LZ4F_max64KB;
    prefs.frameInfo.blockMode = LZ4F_blockIndependent;
    prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
    prefs.frameInfo.frameType = LZ4F_frame;
    prefs.compressionLevel = level;

    bound = LZ4F_compressFrameBound(in_len, &prefs);
    if (kp_writer_reserve(out, bound))
        return out->err;
    cctx = LZ4F_createCompressionContext_advanced(kp_compress_lz4_mem(al), LZ4F_VERSION);
    if (!cctx)
        return KP_E_NOMEM;
    n = LZ4F_compressFrame_usingCDict(cctx, out->buf + out->len, bound, in, in_len, NULL, &prefs);
    LZ4F_freeCompressionContext(cctx);
    if (LZ4F_isError(n))
        return KP_E_NOMEM;
    out->len += n;
    return 0;
}

static int kp_compress_zstd(const uint8_t *in, size_t in_len, kp_writer_t *out, int level,
                            const kp_alloc_t *al)
{
    ZSTD_CCtx *cctx;
    size_t bound, n;

    if (level == KP_COMPRESS_LEVEL_DEFAULT)
        level = KP_ZSTD_LEVEL_DEFAULT;
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
        return KP_E_INVALID;
    bound = ZSTD_compressBound(in_len);
    if (ZSTD_isError(bound))
        return KP_E_TOO_LARGE;
    if (kp_writer_reserve(out, bound))
        return out->err;
    cctx = ZSTD_createCCtx_advanced(kp_compress_zstd_mem(al));
    if (!cctx)
        return KP_E_NOMEM;
    n = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(n))
        n = ZSTD_compress2(cctx, out->buf + out->len, bound, in, in_len);
    ZSTD_freeCCtx(cctx);
    if (ZSTD_isError(n))
        return ZSTD_getErrorCode(n) == ZSTD_error_memory_allocation ? KP_E_NOMEM : KP_E_INVALID;
    out->len += n;
    return 0;
}

int kp_compress_ex(int codec, const void *in, size_t in_len, kp_writer_t *out, int level,
                   const kp_alloc_t *al)
{
    size_t start = out->len;
    int rc;

    if (out->err)
        return out->err;
    if (!al)
        al = &kp_compress_default_alloc;
    switch (codec) {
    case KP_CODEC_NONE:
        kp_write_raw(out, in, in_len);
        rc = out->err;
        break;
    case KP_CODEC_GZIP:
        rc = kp_compress_gzip(in, in_len, out, level, al);
        break;
    case KP_CODEC_SNAPPY:
        rc = kp_compress_snappy(in, in_len, out);
        break;
    case KP_CODEC_LZ4:
        rc = kp_compress_lz4(in, in_len, out, level, al);
        break;
    case KP_CODEC_ZSTD:
        rc = kp_compress_zstd(in, in_len, out, level, al);
        break;
    default:
        rc = KP_E_UNSUPPORTED;
        break;
    }
    if (rc)
        out->len = start;
    return rc;
}

int kp_compress(int codec, const void *in, size_t in_len, kp_writer_t *out, int level)
{
    return kp_compress_ex(codec, in, in_len, out, level, NULL);
}

/* ---- decompression ----------------------------------------------------------------------- */

/*
 * A streaming decoder step: consume from *in and *in_left, write at most dst_cap bytes to dst, set
 * *produced, and set *done once every input byte belongs to a finished member or frame.
 * Returns 0 or a kp_err_t.
 */
typedef int (*kp_decomp_step_fn)(void *st, const uint8_t **in, size_t *in_left, uint8_t *dst,
                                 size_t dst_cap, size_t *produced, bool *done);

/*
 * Drive @p step until the stream is done, appending to @p out under the cap. When the cap (or
 * a fixed writer) is full, a one-byte probe buffer tells "more output follows" (an error) from
 * "only trailers/checksums remain" (fine).
 */
static int kp_decomp_drive(kp_decomp_step_fn step, void *st, const uint8_t *in, size_t in_len,
                           kp_writer_t *out, size_t max_out)
{
    size_t total = 0;

    for (;;) {
        uint8_t probe[1];
        uint8_t *dst;
        size_t room, produced = 0, in_before = in_len;
        int probing = 0, rc;
        bool done = false;

        if (total >= max_out) {
            probing = KP_E_TOO_LARGE;
        } else {
            room = max_out - total;
            if (room > KP_DECOMP_STEP)
                room = KP_DECOMP_STEP;
            if (out->fixed && room > out->cap - out->len)
                room = out->cap - out->len;
            if (room == 0)
                probing = KP_E_OVERFLOW;
            else if (kp_writer_reserve(out, room))
                return out->err;
        }
        if (probing) {
            dst = probe;
            room = sizeof(probe);
        } else {
            dst = out->buf + out->len;
        }
        rc = step(st, &in, &in_len, dst, room, &produced, &done);
        if (rc)
            return rc;
        if (probing && produced) {
            if (probing == KP_E_OVERFLOW)
                out->err = KP_E_OVERFLOW;
            return probing;
        }
        if (!probing) {
            out->len += produced;
            total += produced;
        }
        if (done)
            return 0;
        if (!produced && in_len == in_before)
            return KP_E_CORRUPT; /* no progress: the stream ends early */
    }
}

typedef struct kp_gzip_st_s {
    z_stream zs;
} kp_gzip_st_t;

static int kp_gzip_step(void *st_, const uint8_t **in, size_t *in_left, uint8_t *dst,
                        size_t dst_cap, size_t *produced, bool *done)
{
    kp_gzip_st_t *st = st_;
    uInt in_step = *in_left > UINT_MAX ? UINT_MAX : (uInt)*in_left;
    uInt out_step = dst_cap > UINT_MAX ? UINT_MAX : (uInt)dst_cap;
    int zr;

    st->zs.next_in = (Bytef *)(uintptr_t)*in;
    st->zs.avail_in = in_step;
    st->zs.next_out = dst;
    st->zs.avail_out = out_step;
    zr = inflate(&st->zs, Z_NO_FLUSH);
    *produced = out_step - st->zs.avail_out;
    *in += in_step - st->zs.avail_in;
    *in_left -= in_step - st->zs.avail_in;
    switch (zr) {
    case Z_OK:
    case Z_BUF_ERROR:
        return 0;
    case Z_STREAM_END:
        if (*in_left == 0) {
            *done = true;
            return 0;
        }
        /* Another gzip member follows (GZIPInputStream reads those too); anything else is
         * trailing garbage. */
        if (*in_left < 2 || (*in)[0] != 0x1f || (*in)[1] != 0x8b)
            return KP_E_CORRUPT;
        return inflateReset(&st->zs) == Z_OK ? 0 : KP_E_CORRUPT;
    case Z_MEM_ERROR:
        return KP_E_NOMEM;
    default:
        return KP_E_CORRUPT;
    }
}

static int kp_decompress_gzip(const uint8_t *in, size_t in_len, kp_writer_t *out, size_t max_out,
                              const kp_alloc_t *al)
{
    kp_gzip_st_t st;
    int rc;

    memset(&st, 0, sizeof(st));
    st.zs.zalloc = kp_compress_zalloc;
    st.zs.zfree = kp_compress_zfree;
    st.zs.opaque = (voidpf)al;
    /* 16 + 15: gzip wrapper only (no zlib or raw deflate), any window size. */
    rc = inflateInit2(&st.zs, 16 + MAX_WBITS);
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? KP_E_NOMEM : KP_E_INVALID;
    rc = in_len ? kp_decomp_drive(kp_gzip_step, &st, in, in_len, out, max_out) : KP_E_CORRUPT;
    inflateEnd(&st.zs);
    return rc;
}

static int kp_lz4_step(void *st, const uint8_t **in, size_t *in_left, uint8_t *dst, size_t dst_cap,
                       size_t *produced, bool *done)
{
    size_t src_size = *in_left, dst_size = dst_cap;
    size_t r = LZ4F_decompress(st, dst, &dst_size, *in, &src_size, NULL);

    if (LZ4F_isError(r))
        return LZ4F_getErrorCode(r) == LZ4F_ERROR_allocation_failed ? KP_E_NOMEM : KP_E_CORRUPT;
    *produced = dst_size;
    *in += src_size;
    *in_left -= src_size;
    /* 0: a frame is complete and fully flushed; the context then accepts a next frame. */
    if (r == 0 && *in_left == 0)
        *done = true;
    return 0;
}

static int kp_decompress_lz4(const uint8_t *in, size_t in_len, kp_writer_t *out, size_t max_out,
                             const kp_alloc_t *al)
{
    LZ4F_dctx *dctx;
    int rc;

    if (!in_len)
        return KP_E_CORRUPT;
    dctx = LZ4F_createDecompressionContext_advanced(kp_compress_lz4_mem(al), LZ4F_VERSION);
    if (!dctx)
        return KP_E_NOMEM;
    rc = kp_decomp_drive(kp_lz4_step, dctx, in, in_len, out, max_out);
    LZ4F_freeDecompressionContext(dctx);
    return rc;
}

static int kp_zstd_step(void *st, const uint8_t **in, size_t *in_left, uint8_t *dst, size_t dst_cap,
                        size_t *produced, bool *done)
{
    ZSTD_inBuffer ib = {*in, *in_left, 0};
    ZSTD_outBuffer ob = {dst, dst_cap, 0};
    size_t r = ZSTD_decompressStream(st, &ob, &ib);

    if (ZSTD_isError(r))
        return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? KP_E_NOMEM : KP_E_CORRUPT;
    *produced = ob.pos;
    *in += ib.pos;
    *in_left -= ib.pos;
    /* 0: the current frame is decoded and flushed; more input starts the next frame. */
    if (r == 0 && *in_left == 0)
        *done = true;
    return 0;
}

static int kp_decompress_zstd(const uint8_t *in, size_t in_len, kp_writer_t *out, size_t max_out,
                              const kp_alloc_t *al)
{
    ZSTD_DCtx *dctx;
    int rc;

    if (!in_len)
        return KP_E_CORRUPT;
    dctx = ZSTD_createDCtx_advanced(kp_compress_zstd_mem(al));
    if (!dctx)
        return KP_E_NOMEM;
    rc = kp_decomp_drive(kp_zstd_step, dctx, in, in_len, out, max_out);
    ZSTD_freeDCtx(dctx);
    return rc;
}

/* One raw snappy block, appended under the cap. */
static int kp_snappy_block(const uint8_t *in, size_t in_len, kp_writer_t *out, size_t *total,
                           size_t max_out)
{
    size_t ulen;

    if (snappy_uncompressed_length((const char *)in, in_len, &ulen) != SNAPPY_OK)
        return KP_E_CORRUPT;
    if (ulen > max_out - *total)
        return KP_E_TOO_LARGE;
    if (ulen == 0)
        return snappy_validate_compressed_buffer((const char *)in, in_len) == SNAPPY_OK
                   ? 0
                   : KP_E_CORRUPT;
    if (kp_writer_reserve(out, ulen))
        return out->err;
    if (snappy_uncompress((const char *)in, in_len, (char *)out->buf + out->len, &ulen) !=
        SNAPPY_OK)
        return KP_E_CORRUPT;
    out->len += ulen;
    *total += ulen;
    return 0;
}

static bool kp_snappy_is_xerial(const uint8_t *in, size_t in_len)
{
    return in_len >= 8 && memcmp(in, KP_SNAPPY_XERIAL_MAGIC, 8) == 0;
}

static int kp_decompress_snappy(const uint8_t *in, size_t in_len, kp_writer_t *out, size_t max_out)
{
    size_t total = 0, pos = 0;
    int rc;

    if (!kp_snappy_is_xerial(in, in_len))
        return kp_snappy_block(in, in_len, out, &total, max_out);

    while (pos < in_len) {
        uint32_t n;
        /* A stream header, at the start or between blocks (concatenated streams). A block
         * length is a non-negative int32, so it never starts with the magic's 0x82. */
        if (kp_snappy_is_xerial(in + pos, in_len - pos)) {
            if (in_len - pos < KP_SNAPPY_XERIAL_HDR_SIZE)
                return KP_E_CORRUPT;
            pos += KP_SNAPPY_XERIAL_HDR_SIZE;
            continue;
        }
        if (in_len - pos < 4)
            return KP_E_CORRUPT;
        n = ((uint32_t)in[pos] << 24) | ((uint32_t)in[pos + 1] << 16) |
            ((uint32_t)in[pos + 2] << 8) | in[pos + 3];
        pos += 4;
        if (n > INT32_MAX || n > in_len - pos)
            return KP_E_CORRUPT;
        rc = kp_snappy_block(in + pos, n, out, &total, max_out);
        if (rc)
            return rc;
        pos += n;
    }
    return 0;
}

int kp_decompress_ex(int codec, const void *in, size_t in_len, kp_writer_t *out, size_t max_out,
                     const kp_alloc_t *al)
{
    size_t start = out->len;
    int rc;

    if (out->err)
        return out->err;
    if (!al)
        al = &kp_compress_default_alloc;
    switch (codec) {
    case KP_CODEC_NONE:
        if (in_len > max_out)
            return KP_E_TOO_LARGE;
        kp_write_raw(out, in, in_len);
        rc = out->err;
        break;
    case KP_CODEC_GZIP:
        rc = kp_decompress_gzip(in, in_len, out, max_out, al);
        break;
    case KP_CODEC_SNAPPY:
        rc = kp_decompress_snappy(in, in_len, out, max_out);
        break;
    case KP_CODEC_LZ4:
        rc = kp_decompress_lz4(in, in_len, out, max_out, al);
        break;
    case KP_CODEC_ZSTD:
        rc = kp_decompress_zstd(in, in_len, out, max_out, al);
        break;
    default:
        rc = KP_E_UNSUPPORTED;
        break;
    }
    if (rc)
        out->len = start;
    return rc;
}

int kp_decompress(int codec, const void *in, size_t in_len, kp_writer_t *out, size_t max_out)
{
    return kp_decompress_ex(codec, in, in_len, out, max_out, NULL);
}
