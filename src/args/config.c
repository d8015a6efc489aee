/* Reading a run configuration file (config.h) with libyaml's event parser: a stream of one
 * document whose root is a mapping of scalar keys to scalar values. JSON objects are YAML flow
 * mappings, so the same reader takes both. */
#include "args/config.h"

#include "args/flags.h"
#include "ckpt/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static int is_null(const yaml_event_t *ev) {
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)ev->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static const char *event_kind(yaml_event_type_t t) {
    switch (t) {
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_ALIAS_EVENT:
        return "an alias";
    default:
        return "not a single value";
    }
}

void zs_config_free(zs_config *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].value);
    }
    free(c->e);
    free(c->path);
    memset(c, 0, sizeof *c);
}

/* A syntax pass over the whole stream before any value is read: an error at its end (an
 * unclosed list) is reported as the syntax error it is, not as what was read before it. */
static int syntax_check(const char *path, FILE *f) {
    yaml_parser_t p;
    yaml_event_t ev;
    int rc = 0;
    if (!yaml_parser_initialize(&p)) return zs_flag_fail(1, "--config %s: out of memory", path);
    yaml_parser_set_input_file(&p, f);
    for (int done = 0; !done && !rc;) {
        if (!yaml_parser_parse(&p, &ev)) {
            rc = zs_flag_fail(2, "%s:%zu: not valid YAML or JSON: %s%s%s", path,
                             p.problem_mark.line + 1, p.problem ? p.problem : "syntax error",
                             p.context ? " " : "", p.context ? p.context : "");
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return rc;
}

/* A JSON file (named .json, or starting with '{') is held to JSON: YAML's flow syntax, which
 * reads it too, would take a trailing comma or a comment. The line of the first error. */
static int json_check(const char *path, FILE *f) {
    size_t L = strlen(path), n = 0, cap = 0;
    char *text = NULL, buf[65536];
    for (size_t k; (k = fread(buf, 1, sizeof buf, f)) > 0;) {
        if (n + k + 1 > cap) {
            cap = 2 * (n + k + 1);
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                return zs_flag_fail(1, "--config %s: out of memory", path);
            }
            text = t;
        }
        memcpy(text + n, buf, k);
        n += k;
    }
    size_t i = 0;
    while (i < n && strchr(" \t\r\n", text[i]))
        i++;
    int is_json = (L > 5 && !strcmp(path + L - 5, ".json")) || (i < n && text[i] == '{');
    int rc = 0;
    zs_json *root = NULL;
    if (is_json && zs_json_parse(text ? text : "", n, &root) != ZS_OK) {
        /* the parser names a byte offset; the line is what a user looks for */
        const char *msg = zs_last_error(), *at = strstr(msg, "at byte ");
        size_t off = at ? (size_t)strtoull(at + 8, NULL, 10) : n, line = 1;
        for (size_t k = 0; k < off && k < n; k++)
            line += text[k] == '\n';
        rc = zs_flag_fail(2, "%s:%zu: not valid JSON: %s", path, line, msg);
    }
    zs_json_free(root);
    free(text);
    return rc;
}

int zs_config_load(const char *path, zs_config *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return zs_flag_fail(2, "--config %s: %s", path, strerror(errno));
    int pre = json_check(path, f);
    if (!pre) {
        rewind(f);
        pre = syntax_check(path, f);
    }
    if (pre) {
        fclose(f);
        return pre;
    }
    rewind(f);
    yaml_parser_t p;
    yaml_event_t ev;
    int rc = 0, depth = 0, have_ev = 0, cap = 0;
    char *key = NULL;
    int key_line = 0;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return zs_flag_fail(1, "--config %s: out of memory", path);
    }
    yaml_parser_set_input_file(&p, f);
    out->path = strdup(path);
    for (int done = 0; !done;) {
        if (!yaml_parser_parse(&p, &ev)) {
            rc = zs_flag_fail(2, "%s:%zu: not valid YAML or JSON: %s%s%s", path,
                             p.problem_mark.line + 1, p.problem ? p.problem : "syntax error",
                             p.context ? " " : "", p.context ? p.context : "");
            goto done;
        }
        have_ev = 1;
        int line = (int)ev.start_mark.line + 1;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (out->n || depth) {
                rc = zs_flag_fail(2, "%s:%d: one document only (a second '---')", path, line);
                goto done;
            }
            break;
        case YAML_MAPPING_START_EVENT:
            if (depth == 0) {
                depth = 1;
                break;
            }
            /* a mapping as a value: */
            __attribute__((fallthrough));
        case YAML_SEQUENCE_START_EVENT:
        case YAML_ALIAS_EVENT:
            if (depth == 0)
                rc = zs_flag_fail(2,
                                 "%s:%d: expected a mapping of flag names to values (e.g. "
                                 "'batch: 4'), found %s",
                                 path, line, event_kind(ev.type));
            else if (key)
                rc = zs_flag_fail(2, "%s:%d: %s: expected a single value, found %s", path, line, key,
                                 event_kind(ev.type));
            else
                rc = zs_flag_fail(2, "%s:%d: a key must be a flag name, found %s", path, line,
                                 event_kind(ev.type));
            goto done;
        case YAML_MAPPING_END_EVENT:
            depth = 0;
            break;
        case YAML_SCALAR_EVENT: {
            if (depth == 0) {
                rc = zs_flag_fail(2,
                                 "%s:%d: expected a mapping of flag names to values (e.g. "
                                 "'batch: 4'), found '%s'",
                                 path, line, (const char *)ev.data.scalar.value);
                goto done;
            }
            if (!key) {
                key = strdup((const char *)ev.data.scalar.value);
                key_line = line;
                if (!key) goto oom;
                for (int i = 0; i < out->n; i++)
                    if (!strcmp(out->e[i].key, key)) {
                        rc = zs_flag_fail(2, "%s:%d: %s is given twice (first on line %d)", path,
                                         line, key, out->e[i].line);
                        goto done;
                    }
                break;
            }
            if (out->n == cap) {
                cap = cap ? 2 * cap : 16;
                zs_config_entry *e = realloc(out->e, (size_t)cap * sizeof *e);
                if (!e) goto oom;
                out->e = e;
            }
            zs_config_entry *e = &out->e[out->n++];
            e->key = key;
            e->line = key_line;
            e->value = is_null(&ev) ? NULL : strdup((const char *)ev.data.scalar.value);
            e->quoted = ev.data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                        ev.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
            key = NULL;
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
        have_ev = 0;
    }
    goto done;
oom:
    rc = zs_flag_fail(1, "--config %s: out of memory", path);
done:
    if (have_ev) yaml_event_delete(&ev);
    free(key);
    yaml_parser_delete(&p);
    fclose(f);
    if (rc) zs_config_free(out);
    return rc;
}
