#include "kb_apiversions.h"

#include <ctype.h>
#include <stdlib.h>

#include "kb_log.h"
#include "kb_net.h"
#include "kp_errcode.h"
#include "kp_msgs.h"

#define KB_APIV_MAX_KEYS 1024

int kb_apiversions_name_valid(const char *s, int len)
{
    if (len <= 0 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[len - 1]))
        return 0;
    for (int i = 1; i < len - 1; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.')
            return 0;
    return 1;
}

static kb_api_result_t kb_apiversions_handle(void *opaque, kb_req_t *req, kb_resp_t **respp)
{
    kb_api_registry_t *reg = opaque;
    kb_reqctx_t *ctx = kb_req_ctx(req);
    kp_ApiVersionsResponse_t resp;
    kp_ApiVersionsRequest_t rq;
    kb_api_range_t self, *apis;
    int16_t ver = ctx->api_version;
    size_t n;
    kp_writer_t wr;

    kp_ApiVersionsResponse_init(&resp);
    if (kb_api_get(reg, KP_APIKEY_ApiVersions, &self) != 0)
        return KB_API_CLOSE;
    if (ver > self.max_ver) {
        /* Too new: v0 layout, error and the key list; the body is not parsed. */
        resp.ErrorCode = KP_ERR_UNSUPPORTED_VERSION;
        ver = 0;
    } else {
        kp_ApiVersionsRequest_init(&rq);
        if (kp_ApiVersionsRequest_decode(&ctx->body, ctx->arena, &rq, ver) != 0) {
            kb_log_debug("api", "%s: malformed ApiVersions v%d: %s", ctx->peer, ver,
                         ctx->body.errstr ? ctx->body.errstr : "?");
            return KB_API_CLOSE;
        }
        if (ver >= 3 &&
            (!kb_apiversions_name_valid(rq.ClientSoftwareName.ptr, rq.ClientSoftwareName.len) ||
             !kb_apiversions_name_valid(rq.ClientSoftwareVersion.ptr,
                                        rq.ClientSoftwareVersion.len))) {
            resp.ErrorCode = KP_ERR_INVALID_REQUEST;
        }
        if (ver >= 3)
            kb_log_debug("api", "%s: ApiVersions v%d from %.*s %.*s", ctx->peer, ver,
                         rq.ClientSoftwareName.len > 0 ? (int)rq.ClientSoftwareName.len : 0,
                         rq.ClientSoftwareName.ptr ? rq.ClientSoftwareName.ptr : "",
                         rq.ClientSoftwareVersion.len > 0 ? (int)rq.ClientSoftwareVersion.len : 0,
                         rq.ClientSoftwareVersion.ptr ? rq.ClientSoftwareVersion.ptr : "");
    }

    if (resp.ErrorCode != KP_ERR_INVALID_REQUEST) {
        apis = kp_arena_calloc(ctx->arena, KB_APIV_MAX_KEYS, sizeof(*apis));
        if (!apis)
            return KB_API_CLOSE;
        n = kb_api_list(reg, apis, KB_APIV_MAX_KEYS);
        if (n > KB_APIV_MAX_KEYS)
            n = KB_APIV_MAX_KEYS;
        resp.ApiKeys.v = kp_arena_calloc(ctx->arena, n ? n : 1, sizeof(*resp.ApiKeys.v));
        if (!resp.ApiKeys.v)
            return KB_API_CLOSE;
        resp.ApiKeys.cnt = 0;
        for (size_t i = 0; i < n; i++) {
            kp_ApiVersionsResponse_ApiVersion_t *av;
            if (!kb_api_advertised_on(reg, &apis[i], ctx->listener))
                continue; /* a controller API on a client listener */
            av = &resp.ApiKeys.v[resp.ApiKeys.cnt++];
            kp_ApiVersionsResponse_ApiVersion_init(av);
            av->ApiKey = apis[i].api_key;
            av->MinVersion = apis[i].min_ver;
            av->MaxVersion = apis[i].max_ver;
            if (av->ApiKey == KP_APIKEY_Produce)
                av->MinVersion = 0; /* KAFKA-18659, see the header */
        }
    }

    kp_writer_init(&wr);
    if (kp_ApiVersionsResponse_encode(&wr, &resp, ver) != 0) {
        kb_log_error("api", "cannot encode ApiVersions v%d: %s", ver, kp_err_str(wr.err));
        kp_writer_free(&wr);
        return KB_API_CLOSE;
    }
    *respp = kb_resp_from_writer(&wr);
    kp_writer_free(&wr);
    return *respp ? KB_API_RESPOND : KB_API_CLOSE;
}

int kb_apiversions_register(kb_api_registry_t *reg)
{
    const kp_api_info_t *info = kp_api_lookup(KP_APIKEY_ApiVersions);
    if (!info)
        return -1;
    return kb_api_register(reg, KP_APIKEY_ApiVersions, info->min_ver, info->max_ver,
                           kb_apiversions_handle, reg, KB_API_CONCURRENT);
}
