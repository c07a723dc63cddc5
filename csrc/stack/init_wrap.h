#ifndef SANDSTACK_STACK_INIT_WRAP_H
#define SANDSTACK_STACK_INIT_WRAP_H
/* The sandbox's command under sandstack-init (csrc/init): its Entrypoint and Cmd as the engine
 * would merge them from the create body and the image, then run by the init as its child.
 * Pure data (init_wrap.c). */
#include <cjson/cJSON.h>

/* The init's volume in a stack, and the container that writes it (both <project>-<key>): a
 * name no declared volume or service can take (those are lowercase letters, digits and '-'). */
#define SS_INIT_VOLUME_KEY "sandstack_init"

/* The engine's merge (Docker 20.10 and later): a body Entrypoint that is absent or null takes
 * the image's; one that is [""] means none, and then the image's Cmd is not taken either; any
 * other given Entrypoint (the empty list too) is kept. The image's Cmd is taken when the body
 * gives none (or an empty one) and the Entrypoint was not given as a non-empty list. Each
 * argument may be NULL (absent). Sets *entrypoint and *cmd to new arrays the caller owns. */
void ss_stack_merge_command(const cJSON *body_entrypoint, const cJSON *body_cmd, const cJSON *image_entrypoint,
                            const cJSON *image_cmd, cJSON **entrypoint, cJSON **cmd);

/* The merged command wrapped: Entrypoint [init, "--", entrypoint...], Cmd the merged Cmd (given
 * as a list, even empty, so the image's is never added again). 0, or -1 when the merged
 * command is empty (nothing to run: the body is left to the engine, which refuses it). */
int ss_stack_init_wrap(const cJSON *body_entrypoint, const cJSON *body_cmd, const cJSON *image_entrypoint,
                       const cJSON *image_cmd, cJSON **entrypoint, cJSON **cmd);

/* The reverse, for a commit of a wrapped container (so an image made from it is not wrapped
 * twice when it is started again): its Entrypoint and Cmd without the init. 0, or -1 when the
 * Entrypoint is not the init's. */
int ss_stack_init_unwrap(const cJSON *entrypoint, const cJSON *cmd, cJSON **out_entrypoint, cJSON **out_cmd);

#endif
