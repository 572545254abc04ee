/*
 * Chat templates. We do not run Jinja: the family is recognised from
 * markers in tokenizer.chat_template and rendered by hand, following the
 * reference templates:
 *
 *   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
 *           If the template injects a default system message when the first
 *           message is not "system" (SmolLM2: "You are a helpful AI assistant
 *           named SmolLM, trained by Hugging Face"), that text is read from
 *           the template and injected the same way.
 *   qwen3   ChatML (no default system message) whose template knows <think>:
 *           an assistant turn's reasoning ("<think>...</think>" at the start
 *           of its content) is dropped from turns before the last user query
 *           and kept, re-formatted, after it; tool results become
 *           <tool_response> blocks in a user turn. Thinking stays enabled
 *           (the generation prompt is "<|im_start|>assistant\n").
 *   llama3  <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
 *           ... <|start_header_id|>assistant<|end_header_id|>\n\n
 *   llama2  [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user|trim} [/INST] {assistant|trim} </s><s>[INST] ...
 *   gemma   <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n ... <start_of_turn>model\n
 *           (Gemma 3: a system message is prepended to the first user turn, "\n\n" between)
 *
 * The text never starts with BOS: tokenize it with KVS_TOKENIZE_ADD_BOS (and
 * PARSE_SPECIAL, so the markers become their special tokens), as llama.cpp
 * does. Later turns' "<s>" (llama2) are part of the text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

#define KEY_TEMPLATE "tokenizer.chat_template"
/* Where a user chooses a family, in the errors that ask for one. */
#define CHOOSE_WHERE                                                                                   \
    "the CLI's and serve's --chat-template; kvs_model_params.chat_template or kvs_chat_render's "      \
    "family; Python: Model.load(chat_template=...) or render_chat(family=...)"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Jinja's trim / Python's str.strip() (ASCII whitespace). */
static void sb_trimmed(sbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && is_ws(s[i])) i++;
    while (n > i && is_ws(s[n - 1])) n--;
    sb_put(b, s + i, n - i);
}

static const char *memfind(const char *h, size_t hn, const char *needle) {
    size_t nn = strlen(needle);
    if (nn == 0 || nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && memcmp(h + i, needle, nn) == 0) return h + i;
    return NULL;
}

const char *kvs_chat_family_of_template(const char *tmpl, size_t len) {
    if (!tmpl || len == 0) return NULL;
    if (memfind(tmpl, len, "<|im_start|>") && memfind(tmpl, len, "<think>")) return "qwen3";
    if (memfind(tmpl, len, "<|im_start|>")) return "chatml";
    if (memfind(tmpl, len, "<|start_header_id|>")) return "llama3";
    if (memfind(tmpl, len, "[INST]")) return "llama2";
    if (memfind(tmpl, len, "<start_of_turn>")) return "gemma";
    return NULL;
}

const char *kvs_chat_detect_family(const kvs_gguf *g) {
    kvs_gguf_str s;
    if (!g || kvs_gguf_get_str(g, KEY_TEMPLATE, &s) != 0) return "";
    const char *f = kvs_chat_family_of_template(s.ptr, (size_t)s.len);
    return f ? f : "";
}

/* The default system message a ChatML template injects, unescaped into
 * *out (malloc'd), or *out = NULL if it has none. It is the text of a
 * string literal '<|im_start|>system\n...<|im_end|>' (no quote between:
 * a literal cut by a quote is a concatenation with messages[0], not a
 * default). */
static int chatml_default_system(const char *tmpl, size_t len, char **out) {
    static const char head[] = "<|im_start|>system";
    *out = NULL;
    const char *end = tmpl + len, *p = tmpl;
    /* Heads before one <|im_end|> share it and the last quote before it:
     * each found once (a 2 MB template of heads before one end had taken
     * 44 s a render, each head scanning to the end again). */
    const char *stop = NULL, *last_quote = NULL;
    while ((p = memfind(p, (size_t)(end - p), head)) != NULL) {
        const char *q = p + sizeof head - 1;
        p = q;
        if (q < end && *q == '\n') q++;
        else if (end - q >= 2 && q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        if (!stop || q >= stop) {
            stop = memfind(q, (size_t)(end - q), "<|im_end|>");
            if (!stop) return KVS_OK;
            last_quote = NULL;
            for (const char *c = q; c < stop; c++) {
                if (*c == '\\') { c++; continue; }
                if (*c == '\'' || *c == '"') last_quote = c;
            }
        }
        if (last_quote && last_quote >= q) continue; /* a quoted text: not a literal default */
        sbuf b = {0};
        for (const char *c = q; c < stop; c++) {
            char ch = *c;
            if (ch == '\\' && c + 1 < stop) {
                c++;
                ch = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c == 'r' ? '\r' : *c;
            }
            sb_put(&b, &ch, 1);
        }
        sb_put(&b, "", 0);
        if (b.oom) {
            free(b.p);
            return kvs_error(KVS_ERR_NOMEM, "chat template: out of memory");
        }
        *out = b.p;
        return KVS_OK;
    }
    return KVS_OK;
}

static void render_chatml(sbuf *b, const char *default_sys, const kvs_chat_message *m, int n, int add_gen) {
    for (int i = 0; i < n; i++) {
        if (i == 0 && default_sys && strcmp(m[0].role, "system") != 0) {
            sb_str(b, "<|im_start|>system\n");
            sb_str(b, default_sys);
            sb_str(b, "<|im_end|>\n");
        }
        sb_str(b, "<|im_start|>");
        sb_str(b, m[i].role);
        sb_str(b, "\n");
        sb_str(b, m[i].content);
        sb_str(b, "<|im_end|>\n");
    }
    if (add_gen) sb_str(b, "<|im_start|>assistant\n");
}

/* Python's str.strip-family on '\n' only, as Qwen3's template uses them. */
static void nl_trim(const char **b, const char **e, int left, int right) {
    while (left && *b < *e && **b == '\n') (*b)++;
    while (right && *e > *b && (*e)[-1] == '\n') (*e)--;
}

static int is_tool_response(const char *c) {
    size_t n = strlen(c);
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    return n >= sizeof open - 1 + sizeof close - 1 && !strncmp(c, open, sizeof open - 1) &&
           !strcmp(c + n - (sizeof close - 1), close);
}

/* Qwen3's template (its published Jinja, without tools / tool_calls). */
static int render_qwen3(sbuf *b, const kvs_chat_message *m, int n, int add_gen) {
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user") && !is_tool_response(m[i].content)) { last_query = i; break; }
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role, *c = m[i].content;
        if (!strcmp(role, "user") || !strcmp(role, "system")) {
            sb_str(b, "<|im_start|>");
            sb_str(b, role);
            sb_str(b, "\n");
            sb_str(b, c);
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            const char *cb = c, *ce = c + strlen(c), *rb = c, *re = c; /* content, reasoning */
            const char *end_think = strstr(c, "</think>");
            if (end_think) {
                re = end_think; /* reasoning: before the first </think>, after the last <think> in it */
                for (const char *t = c; (t = memfind(t, (size_t)(re - t), "<think>")) != NULL; t += 7) rb = t + 7;
                nl_trim(&rb, &re, 1, 1);
                for (const char *t = c; (t = strstr(t, "</think>")) != NULL; t += 8) cb = t + 8; /* after the last */
                nl_trim(&cb, &ce, 1, 0);
            }
            sb_str(b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || re > rb)) {
                nl_trim(&cb, &ce, 1, 0);
                sb_str(b, "<think>\n");
                sb_put(b, rb, (size_t)(re - rb));
                sb_str(b, "\n</think>\n\n");
            }
            sb_put(b, cb, (size_t)(ce - cb));
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(m[i - 1].role, "tool")) sb_str(b, "<|im_start|>user");
            sb_str(b, "\n<tool_response>\n");
            sb_str(b, c);
            sb_str(b, "\n</tool_response>");
            if (i == n - 1 || strcmp(m[i + 1].role, "tool")) sb_str(b, "<|im_end|>\n");
        } else {
            return kvs_error(KVS_ERR_INVALID_ARG,
                             "chat template qwen3: message %d has role '%.40s' (system, user, assistant or tool)", i,
                             role);
        }
    }
    if (add_gen) sb_str(b, "<|im_start|>assistant\n");
    return KVS_OK;
}

static void render_llama3(sbuf *b, const kvs_chat_message *m, int n, int add_gen) {
    for (int i = 0; i < n; i++) {
        sb_str(b, "<|start_header_id|>");
        sb_str(b, m[i].role);
        sb_str(b, "<|end_header_id|>\n\n");
        sb_trimmed(b, m[i].content);
        sb_str(b, "<|eot_id|>");
    }
    if (add_gen) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma 3's template: roles user / model, the system message inside the
 * first user turn. */
static void render_gemma(sbuf *b, const kvs_chat_message *m, int n, int add_gen) {
    const char *sys = n > 0 && strcmp(m[0].role, "system") == 0 ? m[0].content : NULL;
    for (int i = sys ? 1 : 0; i < n; i++) {
        sb_str(b, "<start_of_turn>");
        sb_str(b, strcmp(m[i].role, "assistant") == 0 ? "model" : m[i].role);
        sb_str(b, "\n");
        if (sys && i == 1) {
            sb_trimmed(b, sys);
            sb_str(b, "\n\n");
        }
        sb_trimmed(b, m[i].content);
        sb_str(b, "<end_of_turn>\n");
    }
    if (add_gen) sb_str(b, "<start_of_turn>model\n");
}

/* Meta's Llama-2 template: the system message goes inside the first user
 * turn; roles after it must be user / assistant. The generation prompt is
 * implicit (the text ends with [/INST]). */
static int render_llama2(sbuf *b, const kvs_chat_message *m, int n) {
    const char *sys = NULL;
    int i = 0, turns = 0;
    if (n > 0 && strcmp(m[0].role, "system") == 0) sys = m[i++].content;
    if (sys && (i == n || strcmp(m[i].role, "user") != 0)) {
        /* A system message with no user turn after it: a turn of its own. */
        sb_str(b, "[INST] <<SYS>>\n");
        sb_str(b, sys);
        sb_str(b, "\n<</SYS>> [/INST]");
        sys = NULL;
        turns++;
    }
    for (; i < n; i++) {
        if (strcmp(m[i].role, "user") == 0) {
            sb_str(b, turns++ ? "<s>[INST] " : "[INST] ");
            if (sys) {
                sbuf c = {0};
                sb_str(&c, "<<SYS>>\n");
                sb_str(&c, sys);
                sb_str(&c, "\n<</SYS>>\n\n");
                sb_str(&c, m[i].content);
                if (c.oom) { free(c.p); b->oom = 1; return KVS_OK; }
                sb_trimmed(b, c.p);
                free(c.p);
                sys = NULL;
            } else {
                sb_trimmed(b, m[i].content);
            }
            sb_str(b, " [/INST]");
        } else if (strcmp(m[i].role, "assistant") == 0) {
            sb_str(b, " ");
            sb_trimmed(b, m[i].content);
            sb_str(b, " </s>");
        } else {
            return kvs_error(KVS_ERR_INVALID_ARG,
                             "chat template llama2: message %d has role '%.40s'; only a first 'system', "
                             "then 'user' / 'assistant' are supported",
                             i, m[i].role);
        }
    }
    return KVS_OK;
}

/* The roles each family renders. A message with another role is refused
 * before anything is rendered, whatever the family (chatml, llama3 and
 * gemma had written any role into the prompt: "user<|im_end|>" opened a
 * turn of its own). */
typedef struct family_roles {
    const char *family;
    const char *roles[5]; /* NULL-terminated */
} family_roles;

static const family_roles k_family_roles[] = {
    {"chatml", {"system", "user", "assistant", NULL}},
    {"qwen3", {"system", "user", "assistant", "tool", NULL}},
    {"llama3", {"system", "user", "assistant", NULL}},
    {"llama2", {"system", "user", "assistant", NULL}},
    {"gemma", {"system", "user", "assistant", NULL}},
};

const char *kvs_chat_family_named(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof k_family_roles / sizeof k_family_roles[0]; i++)
        if (!strcmp(k_family_roles[i].family, name)) return k_family_roles[i].family;
    return NULL;
}

/* KVS_OK if every message's role is one fam renders (an unknown family is
 * refused later, by name). */
static int check_roles(const char *fam, const kvs_chat_message *m, int n) {
    const family_roles *f = NULL;
    for (size_t i = 0; i < sizeof k_family_roles / sizeof k_family_roles[0]; i++)
        if (!strcmp(k_family_roles[i].family, fam)) f = &k_family_roles[i];
    if (!f) return KVS_OK;
    for (int i = 0; i < n; i++) {
        int known = 0;
        for (int r = 0; f->roles[r] && !known; r++) known = !strcmp(m[i].role, f->roles[r]);
        if (known) continue;
        char list[64] = "";
        for (int r = 0; f->roles[r]; r++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", r ? ", " : "", f->roles[r]);
        return kvs_error(KVS_ERR_INVALID_ARG, "chat template %s: message %d has role '%.40s'; the roles it knows: %s",
                         fam, i, m[i].role, list);
    }
    return KVS_OK;
}

int kvs_chat_render_template(const char *tmpl, size_t tmpl_len, const char *family,
                             const kvs_chat_message *msgs, int n_msgs, int add_generation_prompt,
                             char **out) {
    if (!out || n_msgs < 0 || (!msgs && n_msgs > 0))
        return kvs_error(KVS_ERR_INVALID_ARG, "kvs_chat_render: NULL output or bad message count");
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return kvs_error(KVS_ERR_INVALID_ARG, "kvs_chat_render: message %d has a NULL role or content", i);
    if (tmpl == NULL) tmpl_len = 0;

    const char *fam = family;
    if (!fam) {
        fam = kvs_chat_family_of_template(tmpl, tmpl_len);
        if (!fam && tmpl_len == 0)
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "the model has no %s; pass a template family (" KVS_CHAT_FAMILIES ") "
                             "to choose one (" CHOOSE_WHERE ")", KEY_TEMPLATE);
        if (!fam) {
            /* Name the template by its first characters, on one line. */
            char head[64];
            size_t k = 0;
            for (size_t i = 0; i < tmpl_len && k < 60; i++) head[k++] = (tmpl[i] == '\n' || tmpl[i] == '\r') ? ' ' : tmpl[i];
            head[k] = 0;
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "chat template not recognised: \"%s%s\"; pass a template family "
                             "(" KVS_CHAT_FAMILIES ") to override (" CHOOSE_WHERE ")",
                             head, tmpl_len > 60 ? "..." : "");
        }
    }

    int st = check_roles(fam, msgs, n_msgs);
    if (st) return st;
    sbuf b = {0};
    sb_put(&b, "", 0);
    if (strcmp(fam, "chatml") == 0) {
        char *def = NULL;
        const char *detected = kvs_chat_family_of_template(tmpl, tmpl_len);
        /* The default system message only comes from a ChatML template. */
        if (detected && strcmp(detected, "chatml") == 0) st = chatml_default_system(tmpl, tmpl_len, &def);
        if (st == KVS_OK) render_chatml(&b, def, msgs, n_msgs, add_generation_prompt);
        free(def);
    } else if (strcmp(fam, "qwen3") == 0) {
        st = render_qwen3(&b, msgs, n_msgs, add_generation_prompt);
    } else if (strcmp(fam, "llama3") == 0) {
        render_llama3(&b, msgs, n_msgs, add_generation_prompt);
    } else if (strcmp(fam, "llama2") == 0) {
        st = render_llama2(&b, msgs, n_msgs);
    } else if (strcmp(fam, "gemma") == 0) {
        render_gemma(&b, msgs, n_msgs, add_generation_prompt);
    } else {
        st = kvs_error(KVS_ERR_INVALID_ARG, "unknown chat template family '%.40s' (known: " KVS_CHAT_FAMILIES ")", fam);
    }
    if (st == KVS_OK && b.oom) st = kvs_error(KVS_ERR_NOMEM, "kvs_chat_render: out of memory");
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return KVS_OK;
}

int kvs_chat_render_gguf(const kvs_gguf *g, const char *family, const kvs_chat_message *msgs, int n_msgs,
                         int add_generation_prompt, char **out) {
    kvs_gguf_str s = {NULL, 0};
    if (g) {
        int st = kvs_gguf_get_str(g, KEY_TEMPLATE, &s);
        if (st && st != KVS_ERR_NOT_FOUND) return st;
        if (st) s = (kvs_gguf_str){NULL, 0};
    }
    return kvs_chat_render_template(s.ptr, (size_t)s.len, family, msgs, n_msgs, add_generation_prompt, out);
}
