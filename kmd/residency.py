"""Where BOs live: placing a new BO with eviction, moving a job's BOs back where they
belong at submission, and counting evictions and bytes moved (TTM's ttm_bo_validate
and ttm_mem_evict_first, amdgpu_evict_flags, amdgpu_gem_create_ioctl's retry and
amdgpu_cs_bo_validate; docs/memory.md, "Eviction").

A move never copies: the BO's file is its only copy (kmd.memory), so moving it is
mapping that file over a block of the other aperture, zero pages back over the old
block, and the PTEs of every VM that maps it pointed at the new place. The BO's
physical address and domain change; CPU mappings of the file do not notice.

Tiers: VRAM, then GTT, then SYSTEM (the file only, which no engine reaches). A VRAM
BO is evicted to GTT, or to SYSTEM when GTT has no free room; a GTT BO to SYSTEM.
Every call runs under the device lock.
"""
from __future__ import annotations

import collections
import errno

from vgpu import uapi

from .errors import KmdError
from .memory import SYSTEM, Placement
from .userq_ioctl import evicting

VRAM, GTT = uapi.AMDGPU_GEM_DOMAIN_VRAM, uapi.AMDGPU_GEM_DOMAIN_GTT
TIERS = (VRAM, GTT)


def allowed_domains(bo) -> int:
    """Where `bo` may live for a job: its preferred domains, plus GTT for a BO that
    prefers VRAM alone (amdgpu_bo_create and GEM_OP SET_PLACEMENT do the same for
    every user BO that is not DISCARDABLE)."""
    d = bo.preferred_domains & (VRAM | GTT)
    return d | GTT if d == VRAM else d


class Residency:
    """The device's LRU lists (one per aperture, least recently used first) and its
    move counters, AMDGPU_INFO_NUM_EVICTIONS and AMDGPU_INFO_NUM_BYTES_MOVED."""

    def __init__(self, dev):
        self.dev = dev
        self.memory = dev.memory
        self.lru: dict[int, collections.OrderedDict] = {d: collections.OrderedDict() for d in TIERS}
        self.evictions = 0     # BOs pushed out of their domain to make room
        self.bytes_moved = 0   # bytes of every move: evictions and moves back
        self.cause = None      # the DrmFile whose GEM_CREATE or CS is placing BOs (tracing)
        self.system: dict[int, object] = {}   # BOs evicted to SYSTEM: at most VRAM + GTT's size

    # -- new BOs ---------------------------------------------------------------
    def place_new(self, size: int, align: int, domains: int, f) -> Placement:
        """A placement for a new BO that may live in `domains` (VRAM and/or GTT), as
        TTM places it: each domain in order (VRAM first) where it fits, then each
        again evicting idle BOs; a BO asking for VRAM alone then gets GTT as well
        (amdgpu_gem_create_ioctl's retry). MemoryError when nothing fits, OSError
        when the BO file cannot be made."""
        if self.memory.bo_count >= self.memory.store.max_bos:
            raise MemoryError(f"the device holds {self.memory.bo_count} BOs, its limit "
                              f"(vm.max_map_count allows {self.memory.store.max_bos})")
        if domains & GTT:   # every domain where it fits, then every domain evicting
            order = [d for d in TIERS if domains & d]
            passes = [(d, False) for d in order] + [(d, True) for d in order]
        else:               # VRAM alone, then the retry with GTT added
            passes = [(VRAM, False), (VRAM, True), (GTT, False), (GTT, True)]
        why = None
        for domain, evict in passes:
            try:
                return self._room(domain, lambda: self.memory.alloc(domain, size, align, f.uid), evict, set())
            except MemoryError as e:
                why = e
        raise why

    def added(self, bo) -> None:
        """Put a new BO at the tail of its domain's LRU list."""
        if bo.domain in self.lru:
            self.lru[bo.domain][id(bo)] = bo

    def forget(self, bo) -> None:
        """Drop a freed (or closing) BO from the LRU lists: it is never moved again."""
        for lru in self.lru.values():
            lru.pop(id(bo), None)
        self.system.pop(id(bo), None)

    # -- submission ------------------------------------------------------------
    def validate(self, bos, f=None) -> int:
        """Make every BO of a job reachable by the engines, in a domain it prefers if it
        can (amdgpu_cs_bo_validate): a BO already in one of its preferred domains stays
        (TTM's compatible placement); one elsewhere is moved to the first preferred
        domain with room, evicting idle BOs that are not the job's; failing that it
        stays where it is if that is allowed, or goes to an allowed domain. Every BO
        of the job goes to the tail of its LRU list. Pinned and userptr BOs are left
        alone. Returns the bytes moved.

        ENOMEM: a BO of the job cannot be placed in any domain it may live in (its
        BOs do not all fit next to the pinned and busy ones). BOs moved before the
        failure stay moved, as in amdgpu. `f`: the submitting file (tracing)."""
        keep = {id(bo) for bo in bos}
        moved = self.bytes_moved
        self.cause = f
        zombies = self.dev.zombie_bos
        for bo in bos:
            if bo.on_chip or bo.pin_count or bo.freed or id(bo) in zombies:
                continue   # a closed BO a BO list still names is not moved any more
            if not bo.domain & bo.preferred_domains:
                self._validate_one(bo, keep)
            lru = self.lru.get(bo.domain)
            if lru is not None:
                lru.move_to_end(id(bo))
        return self.bytes_moved - moved

    def _validate_one(self, bo, keep: set) -> None:
        preferred = [d for d in TIERS if bo.preferred_domains & d]
        allowed = allowed_domains(bo)
        for domains in (preferred, [] if bo.domain & allowed else [d for d in TIERS if allowed & d]):
            for evict in (False, True):
                for domain in domains:
                    try:
                        self._room(domain, lambda: self._move(bo, domain), evict, keep)
                        return
                    except MemoryError:
                        pass
        if not bo.domain & allowed:
            raise KmdError(errno.ENOMEM, f"a BO of {bo.size} bytes of the job cannot be placed in "
                                         f"{'|'.join(_NAMES[d] for d in TIERS if allowed & d)}: "
                                         f"the job's BOs do not all fit")

    # -- eviction --------------------------------------------------------------
    def _room(self, domain: int, attempt, evict: bool, keep: set):
        """attempt() until it stops raising MemoryError; between tries (when `evict`)
        the least recently used evictable BO of `domain` is evicted. Raises the last
        MemoryError when nothing is left to evict."""
        while True:
            try:
                return attempt()
            except MemoryError:
                victim = self._victim(domain, keep) if evict else None
                if victim is None:
                    raise
                self.evict(victim)

    def evictable(self, bo, keep=frozenset()) -> bool:
        """Idle and movable: not `keep`'s (the job being validated), not pinned, not in
        the BO list of a queued or running job (busy_jobs; a job without a list holds
        every BO of its VM), not freed or waiting to be freed. A BO that a running job
        could reach through its VM but did not list may go, as in amdgpu: a job must
        name the BOs it uses (kmd/cs.py, job_bos)."""
        return not (id(bo) in keep or bo.pin_count or bo.busy_jobs or bo.freed or id(bo) in self.dev.zombie_bos)

    def _victim(self, domain: int, keep: set):
        return next((bo for bo in self.lru[domain].values() if self.evictable(bo, keep)), None)

    def evict(self, bo) -> None:
        """Move `bo` out of its domain (amdgpu_evict_flags): VRAM to GTT where GTT has
        free room, else to SYSTEM; GTT to SYSTEM. Counted in `evictions`."""
        target = SYSTEM
        if bo.domain == VRAM:
            try:
                self._move(bo, GTT)
                target = None
            except MemoryError:
                pass
        if target is not None:
            self._move(bo, target)
        self.evictions += 1

    def _move(self, bo, domain: int) -> None:
        """Place `bo`'s file in `domain` (kmd.memory.DeviceMemory.move), then point its
        domain, storage and every VM's PTEs at the new place. MemoryError: no room
        (SYSTEM holds at most VRAM + GTT's size: its pages are tmpfs pages too, as
        TTM limits system pages)."""
        limit = self.memory.vram_allocator.size + self.memory.gtt_size
        if domain == SYSTEM and sum(b.size for b in self.system.values()) + bo.size > limit:
            raise MemoryError(f"SYSTEM holds {limit} bytes of evicted BOs at most")
        with evicting(self.dev, bo):   # user queues that reach it wait between packets
            self._place(bo, domain)

    def _place(self, bo, domain: int) -> None:
        new = self.memory.move(bo.placement, domain, bo.size, bo.alignment)
        old = bo.domain
        self.forget(bo)
        bo.relocate(new, self.memory.storage(new))
        if domain in self.lru:
            self.lru[domain][id(bo)] = bo
        elif domain == SYSTEM:
            self.system[id(bo)] = bo
        self.bytes_moved += bo.size
        for f in self.dev.files.values():
            if f.vm.maps_bo(bo):
                f.vm.rebind(bo)
        if self.dev.trace.on:
            self.dev.trace.bo_move(self.cause, bo, old)
            self.dev.trace.memory_changed(self.memory, bo.owner_pid)


_NAMES = {VRAM: "VRAM", GTT: "GTT"}
