/*
 * fuzz_acl_store.c -- libFuzzer target for the ACL store file of broker/acl (`kbroker-acls`,
 * persisted-state loading).
 *
 * Input: the file's bytes. Each input is parsed as it is, and once more with the length and
 * CRC-32C fields of the header recomputed, so that mutations reach the bindings behind the
 * checksum. Properties checked: parsing never crashes or leaks, and a failure names the file and
 * leaves nothing behind; a file that parses holds only bindings CreateAcls would accept; it
 * re-encodes to exactly the same bytes (the format is canonical), and the image built from it
 * answers describe and authorize.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kb_acl_int.h"
#include "kp_crc32c.h"
#include "kp_errcode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_acl_store_one(const uint8_t *data, size_t size)
{
    kb_acl_list_t l;
    char err[512];
    const kb_acl_binding_t **ptrs;
    kp_writer_t wr;
    kb_acl_opts_t o = {.enabled = true, .super_users = "User:admin"};
    kb_acl_filter_t any = {.restype = KB_ACL_RES_ANY,
                           .pattern = KB_ACL_PAT_ANY,
                           .op = KB_ACL_OP_ANY,
                           .perm = KB_ACL_PERM_ANY};
    kb_acl_list_t d;
    kb_acl_t *acl;

    if (kb_acl_store_parse(data, size, "fuzz", &l, err, sizeof(err)) != 0) {
        if (l.cnt != 0 || l.v != NULL || strncmp(err, "fuzz", 4) != 0)
            __builtin_trap(); /* failures leave nothing behind and name the file */
        return;
    }
    ptrs = calloc(l.cnt + 1, sizeof(*ptrs));
    if (!ptrs)
        __builtin_trap();
    for (size_t i = 0; i < l.cnt; i++) {
        char msg[300];
        if (kb_acl_validate(&l.v[i], msg, sizeof(msg)) != KP_ERR_NONE)
            __builtin_trap();
        ptrs[i] = &l.v[i];
    }
    kp_writer_init(&wr);
    if (kb_acl_store_encode(&wr, ptrs, l.cnt) != 0 || wr.len != size ||
        memcmp(wr.buf, data, size) != 0)
        __builtin_trap();
    kp_writer_free(&wr);

    acl = kb_acl_new(&o, err, sizeof(err));
    if (!acl)
        __builtin_trap();
    for (size_t i = 0; i < l.cnt; i++)
        if (kb_acl_apply_add(acl, &l.v[i]) != 0)
            __builtin_trap(); /* parse refuses duplicates */
    if (kb_acl_describe(acl, &any, &d) != 0 || d.cnt != l.cnt)
        __builtin_trap();
    if (l.cnt)
        (void)kb_acl_authorize(acl, l.v[0].principal, l.v[0].host, l.v[0].op, l.v[0].restype,
                               l.v[0].name);
    kb_acl_list_free(&d);
    kb_acl_free(acl);
    free(ptrs);
    kb_acl_list_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed;
    uint32_t crc, len;

    fuzz_acl_store_one(data, size);
    if (size < 14 || size - 14 > INT32_MAX)
        return 0;
    fixed = malloc(size);
    if (!fixed)
        __builtin_trap();
    memcpy(fixed, data, size);
    len = (uint32_t)(size - 14);
    crc = kp_crc32c(0, fixed + 14, len);
    for (int i = 0; i < 4; i++) {
        fixed[6 + i] = (uint8_t)(crc >> (24 - 8 * i));
        fixed[10 + i] = (uint8_t)(len >> (24 - 8 * i));
    }
    fuzz_acl_store_one(fixed, size);
    free(fixed);
    return 0;
}
