/* sandstack-tree: the one program a snapshot runs on the guest's volumes (docs/lifecycle.md,
 * "Snapshot, restore, fork, changes"). The host never borrows a program from the sandbox's
 * image for this: it runs this one, which core.so carries, in a container of an image that
 * holds nothing else (sandstack/tree, imported from these bytes), with the volumes mounted, no
 * network, every capability dropped but what the mode needs, no-new-privileges, a pid and a
 * memory limit and the stack's runtime. Linked statically: the image has no libraries.
 *
 *   sandstack-tree copy FROM TO [no-special]  copy.c: FROM's tree into the empty TO
 *   sandstack-tree diff OLD NEW MAX_BYTES     diff.c: the regular files that differ
 *
 * Exit status (tree.h): 0 done; 1 a system call failed; 2 usage; 3 the tree holds what is not
 * copied; 4 the comparison's answer would pass MAX_BYTES. On 1 and 3, stderr has one line:
 * "<reason> <what>: <path>[: <errno text>]". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree/tree.h"

int main(int argc, char **argv) {
  if ((argc == 4 || (argc == 5 && strcmp(argv[4], "no-special") == 0)) && strcmp(argv[1], "copy") == 0)
    return tree_copy(argv[2], argv[3], argc == 5);
  if (argc == 5 && strcmp(argv[1], "diff") == 0) {
    char *end = NULL;
    unsigned long long max = strtoull(argv[4], &end, 10);
    if (end && !*end && max >= 64) return tree_diff(argv[2], argv[3], (uint64_t)max);
  }
  fputs("usage: sandstack-tree copy FROM TO [no-special] | diff OLD NEW MAX_BYTES\n", stderr);
  return TREE_EXIT_USAGE;
}
