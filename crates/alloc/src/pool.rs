//! Large blocks from our own mappings, kept for reuse when freed.
//!
//! A PSI bucket frees and re-allocates hundreds of MiB of large vectors (spill rows, OKVS rows,
//! VOLE trees, tag tables). From the system allocator each such block is a fresh `mmap`, so
//! every 4 KiB of it page-faults and is zeroed again on first touch; a block kept here comes
//! back already mapped. Each mapping starts with one header page that records the mapping's
//! length, so a block can be reused for any request that fits and grown in place with `mremap`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// Base page size (x86-64, and aarch64 Linux's default).
pub(crate) const PAGE: usize = 4096;

/// Blocks of at least this many bytes come from here (and a split-off tail is kept only if at
/// least this long).
pub(crate) const POOL_MIN: usize = 4 << 20;

/// Freed blocks kept at most (by count and by bytes); others are unmapped at once.
const SLOTS: usize = 32;
const POOL_BYTES: usize = 1 << 30;

/// Freed mappings: `(base, length)`.
pub(crate) struct Pool {
    slots: [(usize, usize); SLOTS],
    used: usize,
    bytes: usize,
}

impl Pool {
    /// A kept mapping for a block needing `need` bytes: the smallest that is long enough, else
    /// the longest (the caller grows it: its pages are already touched, so they cost nothing
    /// new, while a fresh mapping would add its whole length to the process's memory).
    fn take(&mut self, need: usize) -> Option<(usize, usize)> {
        let kept = self.slots[..self.used].iter().copied().enumerate();
        let (i, (base, len)) = kept
            .clone()
            .filter(|&(_, (_, len))| len >= need)
            .min_by_key(|&(_, (_, len))| len)
            .or_else(|| kept.max_by_key(|&(_, (_, len))| len))?;
        self.used -= 1;
        self.slots[i] = self.slots[self.used];
        self.bytes -= len;
        if len >= need && len - need >= POOL_MIN {
            // Much longer than asked: split it, keeping the tail (a mapping of its own; its
            // first page will hold its length when it is handed out). The slot and bytes just
            // freed make room for it, so nothing is evicted.
            let mut none = [(0, 0); SLOTS];
            let _ = self.put(base + need, len - need, &mut none);
            return Some((base, need));
        }
        Some((base, len))
    }

    /// Keeps a freed mapping. If the pool is full, smaller kept mappings make room for it (a
    /// larger one saves more page faults when reused); they are written to `evicted` and their
    /// count returned, for the caller to unmap. `None` if it cannot be kept: the caller unmaps
    /// it.
    ///
    /// Without eviction, many buckets' worth of 4 MiB split-off tails filled all the slots and
    /// every unit's 130–180 MiB row blocks were unmapped and faulted in again (2^24 rows in 16
    /// buckets: ≈ 1.5 GiB of page faults at the receiver for a 450 MiB peak).
    fn put(
        &mut self,
        base: usize,
        len: usize,
        evicted: &mut [(usize, usize); SLOTS],
    ) -> Option<usize> {
        if len > POOL_BYTES {
            return None;
        }
        // Kept mappings smallest first; evict from the front while the pool is still full.
        let mut order = self.slots;
        order[..self.used].sort_unstable_by_key(|&(_, l)| l);
        let (mut k, mut bytes) = (0, self.bytes);
        while self.used - k == SLOTS || bytes + len > POOL_BYTES {
            if k == self.used || order[k].1 >= len {
                return None;
            }
            bytes -= order[k].1;
            k += 1;
        }
        evicted[..k].copy_from_slice(&order[..k]);
        let mut kept = 0;
        for i in 0..self.used {
            if !order[..k].contains(&self.slots[i]) {
                self.slots[kept] = self.slots[i];
                kept += 1;
            }
        }
        self.slots[kept] = (base, len);
        self.used = kept + 1;
        self.bytes = bytes + len;
        Some(k)
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    slots: [(0, 0); SLOTS],
    used: 0,
    bytes: 0,
});

fn pool() -> MutexGuard<'static, Pool> {
    // The critical sections cannot panic; a poisoned lock still holds a consistent pool.
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Set in a child after `fork()`: another thread of the parent may have held the pool's lock at
/// that instant, and it would never be released in the child. The child then maps and unmaps its
/// large blocks directly (blocks the parent had kept are simply left mapped).
static FORKED: AtomicBool = AtomicBool::new(false);
static AT_FORK: Once = Once::new();

extern "C" fn in_forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Whether the pool may be used: registers the fork handler once, and says no in a forked child.
fn usable() -> bool {
    AT_FORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_forked_child));
        }
    });
    !FORKED.load(Ordering::Relaxed)
}

/// The mapping length for a block of `size` bytes: its header page plus `size`, in pages.
fn map_len(size: usize) -> Option<usize> {
    size.checked_add(PAGE)?.checked_next_multiple_of(PAGE)
}

/// A block of `size` bytes (page-aligned), zeroed if asked; null if the system is out of memory.
///
/// # Safety
/// The result must be freed with [`free`] (or resized with [`resize`]).
pub(crate) unsafe fn alloc(size: usize, zeroed: bool) -> *mut u8 {
    let Some(need) = map_len(size) else {
        return std::ptr::null_mut();
    };
    let kept = if usable() { pool().take(need) } else { None };
    let reused = kept.and_then(|(base, len)| {
        if len >= need {
            return Some((base, len));
        }
        // SAFETY: a kept mapping, owned by this call now; MREMAP_MAYMOVE keeps its pages.
        let p = unsafe { libc::mremap(base as *mut libc::c_void, len, need, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            // Kept again (or unmapped); a fresh mapping below serves this request.
            // SAFETY: as in `free`: the whole mapping is ours and unused.
            unsafe { keep_or_unmap(base, len) };
            return None;
        }
        Some((p as usize, need))
    });
    let (base, len, fresh) = match reused {
        Some((base, len)) => (base, len, false),
        None => {
            // SAFETY: a new private anonymous mapping; no existing memory is touched.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    need,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return std::ptr::null_mut();
            }
            crate::advise_mapping(p as usize, need);
            (p as usize, need, true)
        }
    };
    // SAFETY: `[base, base + len)` is a live read-write mapping of at least `PAGE + size` bytes
    // that only this call owns now: its first word records the length, the rest is the block.
    unsafe {
        (base as *mut usize).write(len);
        if zeroed && !fresh {
            ((base + PAGE) as *mut u8).write_bytes(0, size);
        }
    }
    (base + PAGE) as *mut u8
}

/// Keeps a whole unused mapping of ours for reuse, or unmaps it if the pool is full.
///
/// # Safety
/// `[base, base + len)` is a mapping of ours that nothing uses.
unsafe fn keep_or_unmap(base: usize, len: usize) {
    let mut evicted = [(0, 0); SLOTS];
    let kept = if usable() {
        pool().put(base, len, &mut evicted)
    } else {
        None
    };
    let unmap: &[(usize, usize)] = match kept {
        Some(k) => &evicted[..k],
        None => &[(base, len)],
    };
    // Outside the lock: unmapping a large mapping takes a millisecond.
    for &(base, len) in unmap {
        // SAFETY: per the contract, or a kept mapping the pool has just let go of.
        unsafe {
            libc::munmap(base as *mut libc::c_void, len);
        }
    }
}

/// Frees a block from [`alloc`] or [`resize`]: kept for reuse, or unmapped.
///
/// # Safety
/// `ptr` came from [`alloc`] or [`resize`] and is not used again.
pub(crate) unsafe fn free(ptr: *mut u8) {
    let base = ptr as usize - PAGE;
    // SAFETY: the header page of a live block holds its mapping's length.
    let len = unsafe { (base as *const usize).read() };
    // SAFETY: the whole mapping is ours and no longer used.
    unsafe { keep_or_unmap(base, len) };
}

/// Resizes a block from [`alloc`] holding `old_size` bytes to `new_size` bytes, keeping its
/// contents: in place if its mapping is long enough, else moved by `mremap` (no copy through
/// the cache), else, if the kernel refuses that, copied into a new block. Null if out of
/// memory (the old block is then untouched).
///
/// # Safety
/// As [`free`] for `ptr`, which is valid only if the result is null; `old_size` is at most the
/// size the block was allocated or last resized with.
pub(crate) unsafe fn resize(ptr: *mut u8, old_size: usize, new_size: usize) -> *mut u8 {
    let base = ptr as usize - PAGE;
    // SAFETY: as in `free`.
    let len = unsafe { (base as *const usize).read() };
    let Some(need) = map_len(new_size) else {
        return std::ptr::null_mut();
    };
    if need <= len {
        if len - need >= POOL_MIN {
            // A large shrink (a vector trimmed to its length): give the tail back.
            // SAFETY: the tail pages are ours and past the block's new end.
            unsafe {
                libc::munmap((base + need) as *mut libc::c_void, len - need);
                (base as *mut usize).write(need);
            }
        }
        return ptr;
    }
    // SAFETY: the mapping is ours; MREMAP_MAYMOVE keeps its contents, header page included.
    let p = unsafe { libc::mremap(base as *mut libc::c_void, len, need, libc::MREMAP_MAYMOVE) };
    if p != libc::MAP_FAILED {
        // SAFETY: the header page of the moved mapping.
        unsafe { (p as *mut usize).write(need) };
        return (p as usize + PAGE) as *mut u8;
    }
    // `mremap` refuses a range the kernel keeps as more than one mapping (`EFAULT`), or that
    // cannot move: a new block and a copy always work where memory is left.
    // SAFETY: a new block of `new_size > old_size` bytes; `ptr` is live for `old_size` bytes and
    // freed once, after the copy.
    unsafe {
        let q = alloc(new_size, false);
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(ptr, q, old_size.min(new_size));
            free(ptr);
        }
        q
    }
}

/// Unmaps every kept block (a long-lived process, e.g. Python, after a run).
pub(crate) fn trim() {
    if !usable() {
        return;
    }
    let mut p = pool();
    for &(base, len) in &p.slots[..p.used] {
        // SAFETY: kept mappings are ours and unused.
        unsafe {
            libc::munmap(base as *mut libc::c_void, len);
        }
    }
    p.used = 0;
    p.bytes = 0;
}

/// Bytes kept for reuse now.
pub(crate) fn kept_bytes() -> usize {
    if usable() { pool().bytes } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HugePageAlloc;
    use std::alloc::{GlobalAlloc, Layout};
    use std::time::{Duration, Instant};

    fn empty() -> Pool {
        Pool {
            slots: [(0, 0); SLOTS],
            used: 0,
            bytes: 0,
        }
    }

    /// A full pool makes room for a larger block by letting its smallest go, never for a
    /// block no larger than them; split tails always fit.
    #[test]
    fn a_full_pool_keeps_the_largest_blocks() {
        let mb = 1 << 20;
        let mut p = empty();
        let mut evicted = [(0, 0); SLOTS];
        for i in 0..SLOTS {
            assert_eq!(p.put(i << 40, 4 * mb + i * PAGE, &mut evicted), Some(0));
        }
        // Full by slots: a block of the smallest size is refused, a larger one evicts one.
        assert_eq!(p.put(99 << 40, 4 * mb, &mut evicted), None);
        assert_eq!(p.put(100 << 40, 136 * mb, &mut evicted), Some(1));
        assert_eq!(evicted[0], (0, 4 * mb));
        assert_eq!(
            (p.used, p.bytes),
            (SLOTS, p.slots.iter().map(|s| s.1).sum())
        );
        // Full by bytes: evicts as many small blocks as the cap needs (two of ≈ 4 MiB here).
        let big = POOL_BYTES - p.bytes + 8 * mb + 1;
        let k = p.put(101 << 40, big, &mut evicted).unwrap();
        assert_eq!(k, 2);
        assert!(p.bytes <= POOL_BYTES);
        assert!(evicted[..k].iter().all(|&(_, l)| l < 5 * mb));
        assert!(p.slots[..p.used].contains(&(101 << 40, big)));
        assert!(p.slots[..p.used].contains(&(100 << 40, 136 * mb)));
        // Larger than the whole pool: never kept, nothing evicted.
        assert_eq!(p.put(102 << 40, POOL_BYTES + 1, &mut evicted), None);
        // A taken block's split tail goes back without evicting anything.
        let before = p.used;
        assert_eq!(p.take(8 * mb), Some((100 << 40, 8 * mb)));
        assert_eq!(p.used, before, "the tail of the split block is kept");
        assert!(p.slots[..p.used].contains(&((100 << 40) + 8 * mb, 128 * mb)));
    }

    /// A child forked while another thread holds the pool's lock still allocates large blocks.
    #[test]
    fn a_forked_child_never_waits_for_the_pool() {
        assert!(usable());
        let held = pool();
        // SAFETY: the child only maps, writes, unmaps and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let layout = Layout::from_size_align(8 << 20, 16).unwrap();
            // SAFETY: used within its size, freed once with its layout; `_exit` skips the
            // test harness's atexit work in the child.
            unsafe {
                let p = HugePageAlloc.alloc(layout);
                let ok = !p.is_null();
                if ok {
                    p.write_bytes(1, 8 << 20);
                    HugePageAlloc.dealloc(p, layout);
                }
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        let done = loop {
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break true;
            }
            if Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        drop(held);
        assert!(done, "the forked child hung on the pool's lock");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
