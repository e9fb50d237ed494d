/*
 * km_config_doc.h - renders docs/config.md from the configuration tables.
 */
#ifndef KM_CONFIG_DOC_H
#define KM_CONFIG_DOC_H

#include "core/km_config.h"

/** Receives the document piece by piece (NUL-terminated, borrowed). */
typedef void (*km_config_doc_emit_fn)(void *arg, const char *text);

/**
 * Render the Markdown reference of the broker and mirror scopes through emit. Output depends
 * only on the tables (no time, no paths), so the committed file can be compared byte for byte.
 * @thread any
 */
void km_config_doc_render(km_config_doc_emit_fn emit, void *arg);

#endif /* KM_CONFIG_DOC_H */
