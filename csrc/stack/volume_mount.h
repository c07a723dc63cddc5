#ifndef SANDSTACK_STACK_VOLUME_MOUNT_H
#define SANDSTACK_STACK_VOLUME_MOUNT_H
/* A named volume as a HostConfig.Mounts entry. NoCopy: the engine copies nothing of the image
 * at target into a new volume, so no file of an image lands in one of sandstack's volumes
 * (the init's, a snapshot's copies). */
#include <cjson/cJSON.h>

static inline cJSON *ss_volume_mount(const char *volume, const char *target, int read_only) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "Type", "volume");
  cJSON_AddStringToObject(m, "Source", volume);
  cJSON_AddStringToObject(m, "Target", target);
  cJSON_AddBoolToObject(m, "ReadOnly", read_only);
  cJSON_AddBoolToObject(cJSON_AddObjectToObject(m, "VolumeOptions"), "NoCopy", 1);
  return m;
}

#endif
