"""Where key groups were imported from before they moved to :mod:`raytide.core.keygroups`
(they are routing, which the logical model owns). Kept so that old imports go on working."""

from raytide.core.keygroups import DEFAULT_KEY_GROUPS as DEFAULT_KEY_GROUPS
from raytide.core.keygroups import KeyGroupAssignment as KeyGroupAssignment
from raytide.core.keygroups import KeyGroupMove as KeyGroupMove
from raytide.core.keygroups import key_group as key_group
from raytide.core.keygroups import key_groups_of as key_groups_of

__all__ = ["DEFAULT_KEY_GROUPS", "KeyGroupAssignment", "KeyGroupMove", "key_group", "key_groups_of"]
