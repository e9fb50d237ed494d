/*
 * km-config-doc: print docs/config.md (the configuration reference) from the plugin's tables.
 *   km-config-doc            write to standard output
 *   km-config-doc -o FILE    write to FILE
 */
#include <stdio.h>
#include <string.h>

#include "core/km_config_doc.h"

static void km_config_doc_main_emit(void *arg, const char *text)
{
    fputs(text, arg);
}

int main(int argc, char **argv)
{
    FILE *out = stdout;

    if (argc == 3 && strcmp(argv[1], "-o") == 0) {
        out = fopen(argv[2], "w");
        if (out == NULL) {
            perror(argv[2]);
            return 1;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [-o FILE]\n", argv[0]);
        return 2;
    }
    km_config_doc_render(km_config_doc_main_emit, out);
    if (fflush(out) != 0 || ferror(out)) {
        perror("km-config-doc: write");
        return 1;
    }
    if (out != stdout && fclose(out) != 0) {
        perror("km-config-doc: close");
        return 1;
    }
    return 0;
}
