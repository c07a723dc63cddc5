#ifndef SANDSTACK_LIST_FORMAT_H
#define SANDSTACK_LIST_FORMAT_H
/* What sandstack-list (csrc/list/list.c) writes and core.list_parse (csrc/lua/listing.c) reads:
 *
 *   sandstack-list 1\n
 *   one record per entry:  <t> <mode octal> <size> <mtime> <name bytes> <link bytes>\n
 *                          <name><link>\n
 *     t: f (regular file), d (directory), l (symbolic link), o (anything else)
 *   then one last line:    end <count>\n       the whole directory
 *                     or:  over <count>\n      it has more entries than asked for, or more bytes
 *                     or:  error <ENAME>\n     the directory could not be opened or read
 *
 * Names are any bytes but '/' and NUL, so they are counted, never delimited. */
#define SS_LIST_MAGIC "sandstack-list 1\n"
#define SS_LIST_OUTPUT_MAX (64u * 1024u * 1024u) /* bytes of output, past which the helper says over */

#endif
