/*
 * kb_txnmod.h -- the "txn" module of kbroker (the transaction coordinator, kb_txn.h), for
 * broker/core/kb_modules.c. It must come after the "api" module, whose service it uses.
 */
#ifndef KB_TXNMOD_H
#define KB_TXNMOD_H

#include "kb_broker.h"

extern const kb_module_t kb_module_txn;

#endif /* KB_TXNMOD_H */
