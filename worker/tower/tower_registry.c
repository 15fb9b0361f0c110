/* tower_registry.c — finding a tower backend by name in the table the build
 * generates (tower_backends: every backend compiled in). Apart from tower.c,
 * which the backends call, so that no backend file and the table that names
 * it call each other. */
#include "tower.h"

#include <string.h>

const tower_ops_t *tower_backend_find(const char *name)
{
    for (int i = 0; tower_backends[i]; i++)
        if (strcmp(tower_backends[i]->name, name) == 0) return tower_backends[i];
    return NULL;
}
