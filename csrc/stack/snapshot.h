#ifndef SANDSTACK_STACK_SNAPSHOT_H
#define SANDSTACK_STACK_SNAPSHOT_H
/* What a snapshot sends the Engine besides the session's plain requests (session_requests.c):
 *   tree_helper.c     the create request of the container that copies or compares volumes with
 *                     sandstack-tree (csrc/tree), confined like a sandbox;
 *   snapshot_image.c  the image archives POST /images/load takes: the helper's image (the
 *                     program alone) and a snapshot's image (the committed layers under a
 *                     config sandstack writes, so nothing of the sandbox container's own config
 *                     reaches it). */
#include <cjson/cJSON.h>
#include <stddef.h>

#include "util/buf.h"

/* The create request (keyed form: method, path, query, body_json) of helper `name`. args:
 *   mode     "copy" (from -> to) or "diff" (old against new, read-only)
 *   image    the helper image's name (ss_tree_image_archive's tag)
 *   from, to | old, new   the volumes' names
 *   max_bytes            (diff) the answer's budget
 *   no_special           (copy) true: FIFOs and sockets are refused (the runtime is gVisor)
 *   runtime              the stack's runtime, or absent for the engine's default
 *   labels               the helper's labels (an object of strings)
 * NULL with why (a static text) when args lack one of these. */
cJSON *ss_tree_helper_create(const char *name, const cJSON *args, const char **why);

/* The archive of the image holding only the program (prog, n bytes) at /sandstack-tree, its
 * entrypoint, named tag: deterministic, so its id depends on the program only. 0, or -1 (out of
 * memory). */
int ss_tree_image_archive(const void *prog, size_t n, const char *tag, ss_buf *out);

/* The archive of a snapshot's image named repo_tag: the layers of the committed image (its
 * inspect answer, `committed`) and, as its config, the sandbox image's own (the inspect answer
 * `base`) with labels as its only labels. No layer's data is in it: the engine has them all
 * (a load reads a layer only when it does not have it). 0, or -1 with why. */
int ss_snapshot_image_archive(const cJSON *committed, const cJSON *base, const cJSON *labels, const char *repo_tag,
                              ss_buf *out, const char **why);

#endif
