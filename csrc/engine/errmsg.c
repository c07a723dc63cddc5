#include "engine/errmsg.h"

#include <cjson/cJSON.h>
#include <string.h>

/* Copies text into out, control bytes as '?', runs of whitespace kept as they are, trimmed. */
static size_t copy_text(const char *s, size_t len, char *out, size_t outsz) {
  while (len > 0 && (unsigned char)*s <= ' ') s++, len--;
  while (len > 0 && (unsigned char)s[len - 1] <= ' ') len--;
  size_t n = len < outsz - 1 ? len : outsz - 1;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    out[i] = (c < ' ' && c != '\t' && c != '\n') || c == 0x7f ? '?' : (char)c;
  }
  out[n] = '\0';
  return n;
}

size_t sse_error_message(const char *body, size_t len, char *out, size_t outsz) {
  if (outsz == 0) return 0;
  out[0] = '\0';
  if (!body || len == 0) return 0;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (j) {
    const cJSON *m = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "message") : NULL;
    if (cJSON_IsString(m) && m->valuestring) {
      size_t n = copy_text(m->valuestring, strlen(m->valuestring), out, outsz);
      cJSON_Delete(j);
      return n;
    }
    cJSON_Delete(j);
  }
  return copy_text(body, len, out, outsz);
}
