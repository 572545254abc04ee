/*
 * The loaded model: the GGUF mapping, hyperparameters, weight views and the
 * tokenizer. Immutable after kvs_model_load(); shared by contexts.
 */
#ifndef KVS_MODEL_H
#define KVS_MODEL_H

#include "kvstitch.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* Accessors for other modules (the struct itself is private to src/model/). */
const kvs_gguf *kvs_model_gguf(const kvs_model *model);
const kvs_tokenizer *kvs_model_tokenizer(const kvs_model *model);

#endif
