/*
 * kp_compress.h -- the record-batch compression codecs, with the ids of Kafka's batch
 * attributes (bits 0-2): none 0, gzip 1, snappy 2, lz4 3, zstd 4.
 *
 * Output formats are the ones the Java producer writes, so batches we build are readable by
 * every Kafka client:
 *   gzip    a gzip member (RFC 1952), zlib;
 *   snappy  xerial framing (snappy-java's SnappyOutputStream): "\x82SNAPPY\0", int32 version 1,
 *           int32 compatible-version 1, then blocks of [int32 big-endian length][raw snappy],
 *           each block compressing at most 32 KiB of input;
 *   lz4     one standard LZ4 frame (64 KiB independent blocks, no content checksum);
 *   zstd    one zstd frame.
 * Decompression accepts: gzip (concatenated members too), snappy xerial (repeated stream
 * headers between blocks too) *or* raw snappy, LZ4 frames (header checksum and any block or
 * content checksum verified; concatenated frames too), zstd frames (with or without content size,
 * concatenated and skippable frames too). Bytes after the last member/frame that do not start a
 * new one are an error.
 *
 * Decompression output is capped: a stream that would produce more than @p max_out bytes fails
 * with KP_E_TOO_LARGE without ever holding more than max_out bytes (decompression bombs fail
 * cleanly). Never used on the mirror data path, which passes batches through compressed.
 *
 * Memory: every codec context is allocated through a kp_alloc_t (malloc when NULL), which reaches
 * zlib (zalloc/zfree), zstd (ZSTD_customMem) and lz4 (LZ4F_CustomMem). libsnappy's C API has no
 * allocator hook; it allocates only small internal tables and writes into our buffers.
 *
 * @thread any (no shared state)
 */
#ifndef KP_COMPRESS_H
#define KP_COMPRESS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kp_writer.h"

/** Codec ids as stored in the batch attributes' low 3 bits. */
typedef enum kp_codec_e {
    KP_CODEC_NONE = 0,
    KP_CODEC_GZIP = 1,
    KP_CODEC_SNAPPY = 2,
    KP_CODEC_LZ4 = 3,
    KP_CODEC_ZSTD = 4,
} kp_codec_t;

#define KP_CODEC_MAX 4

/** Pass as @p level for the codec's Kafka default (gzip 6, lz4 9, zstd 3; snappy has none). */
#define KP_COMPRESS_LEVEL_DEFAULT INT_MIN

/** The 8 magic bytes that open a xerial-framed snappy stream. */
#define KP_SNAPPY_XERIAL_MAGIC     "\x82SNAPPY\0"
#define KP_SNAPPY_XERIAL_HDR_SIZE  16
#define KP_SNAPPY_XERIAL_BLOCK_MAX (32 * 1024)

/** Allocator for codec contexts. alloc returns NULL on failure; free accepts NULL. */
typedef struct kp_alloc_s {
    void *(*alloc)(void *opaque, size_t size);
    void (*free)(void *opaque, void *ptr);
    void *opaque;
} kp_alloc_t;

/** "none", "gzip", "snappy", "lz4", "zstd", or "unknown". */
const char *kp_codec_name(int codec);

/** True for the ids 0..4. */
bool kp_codec_valid(int codec);

/**
 * Compress @p in_len bytes at @p in (borrowed) with @p codec and append the result to @p out.
 * @p level is the codec's level (gzip 1-9, lz4 1-17, zstd its min..max) or
 * KP_COMPRESS_LEVEL_DEFAULT; ignored for none and snappy.
 * On failure @p out is left at its length on entry.
 * @return 0; KP_E_UNSUPPORTED (unknown codec), KP_E_INVALID (level out of range),
 *         KP_E_NOMEM, KP_E_OVERFLOW (fixed writer too small; also sticky in out->err).
 */
int kp_compress(int codec, const void *in, size_t in_len, kp_writer_t *out, int level);

/** kp_compress() with codec contexts allocated through @p al (NULL: malloc). */
int kp_compress_ex(int codec, const void *in, size_t in_len, kp_writer_t *out, int level,
                   const kp_alloc_t *al);

/**
 * Decompress @p in_len bytes at @p in (borrowed) and append at most @p max_out bytes to @p out
 * (SIZE_MAX: no cap beyond memory). On failure @p out is left at its length on entry.
 * @return 0; KP_E_CORRUPT (malformed, truncated, bad checksum, trailing garbage),
 *         KP_E_TOO_LARGE (output would exceed max_out), KP_E_UNSUPPORTED (unknown codec),
 *         KP_E_NOMEM, KP_E_OVERFLOW (fixed writer too small; sticky in out->err).
 */
int kp_decompress(int codec, const void *in, size_t in_len, kp_writer_t *out, size_t max_out);

/** kp_decompress() with codec contexts allocated through @p al (NULL: malloc). */
int kp_decompress_ex(int codec, const void *in, size_t in_len, kp_writer_t *out, size_t max_out,
                     const kp_alloc_t *al);

#endif /* KP_COMPRESS_H */
