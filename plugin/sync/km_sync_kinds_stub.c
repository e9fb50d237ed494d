/*
 * km_sync_kinds_stub.c - placeholder entry points of the four sync kinds, so that kmirror.so
 * links before the kinds exist: each run ends at once without doing anything.
 *
 * KIND ENGINEERS: when you add your km_sync_<kind>.c to KM_PLUGIN_SOURCES, delete your
 * function from this file in the same commit (the last one deletes the file and its line in
 * plugin/CMakeLists.txt).
 */
#include "sync/km_sync.h"

void km_sync_topics_run(km_sync_run_t *run)
{
    km_sync_run_done(run);
}
