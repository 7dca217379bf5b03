//! # blindjoin-alloc — the system allocator, with reused large blocks and opt-in huge pages
//!
//! PSI at 2^20 items per bucket allocates a few hundred MiB of large, short-lived vectors (spill
//! rows, VOLE trees, OKVS rows, tag tables), frees them and allocates others. [`HugePageAlloc`]
//! forwards small blocks to [`std::alloc::System`]; on Linux it does two things for large ones.
//!
//! **Reuse** (`pool`): blocks of 4 MiB and more are our own mappings, and a freed one is kept
//! (up to 1 GiB) for the next large request, split if much longer, grown in place if shorter.
//! From the system allocator each would be a fresh `mmap` whose every 4 KiB page faults and is
//! zeroed again on first touch. At 2^20 rows per party (RR22, both parties on 2 cores) page
//! faults fell 137k → 93k (receiver) and 104k → 72k (sender), the protocol from 0.51–0.61 s to
//! 0.46–0.49 s, for about 80 MiB more peak memory (`docs/notes/benchmarks-history.md`). [`trim_pool`] gives
//! the kept blocks back (the Python module calls it after each run).
//!
//! **Huge pages**, when `BLINDJOIN_HUGE_PAGES=1` is set: `madvise(MADV_HUGEPAGE)` on every fresh
//! mapping of the pool's, whole (advice on part of one would split it, and `mremap` cannot grow
//! a block across the split): one page fault per 2 MiB instead of per 4 KiB, and fewer TLB
//! misses. Off by default, because what a first touch costs depends on the host. In a VM whose
//! balloon reports free pages to the host (Firecracker and most cloud VMs), a free 2 MiB block
//! is handed back to the host and must be faulted in and zeroed again there; a huge page then
//! costs 1.8 ms per MiB on first touch, against 0.55 ms per MiB for 4 KiB pages
//! (measured on the project's CI VM). At 2^20 rows that was 0.3 s of each party's 1.4 s. On bare
//! metal, or where free pages stay with the guest, huge pages can win, so the switch stays.
//! Where THP is disabled (`/sys/kernel/mm/transparent_hugepage/enabled` = `never`) the advice is
//! a no-op. On other systems the type is a plain pass-through.
//!
//! Binaries opt in:
//!
//! ```
//! #[global_allocator]
//! static ALLOC: blindjoin_alloc::HugePageAlloc = blindjoin_alloc::HugePageAlloc;
//! let v = vec![0u128; 1 << 20];
//! assert_eq!(v.len(), 1 << 20);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations at least this large get the huge-page advice (two huge pages, so at least one
/// aligned huge page lies inside).
pub const HUGE_MIN: usize = 4 << 20;

/// x86-64 / aarch64 (4 KiB base pages) transparent-huge-page size.
const HUGE_PAGE: usize = 2 << 20;

/// The environment variable that turns the huge-page advice on (`1`).
pub const HUGE_PAGES_VAR: &std::ffi::CStr = c"BLINDJOIN_HUGE_PAGES";

/// Whether the advice is on: 0 not yet read, 1 off, 2 on. Read once, from the environment, at
/// the first large allocation (`getenv` does not allocate, so it is safe inside the allocator).
#[cfg(target_os = "linux")]
static HUGE_STATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

#[cfg(target_os = "linux")]
fn huge_pages_on() -> bool {
    use std::sync::atomic::Ordering;
    match HUGE_STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: the name is a NUL-terminated literal; the returned pointer is only read
            // (up to its NUL) before any other environment call of ours.
            let on = unsafe {
                let v = libc::getenv(HUGE_PAGES_VAR.as_ptr());
                !v.is_null() && std::ffi::CStr::from_ptr(v).to_bytes() == b"1"
            };
            HUGE_STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
    }
}

/// The system allocator, with large blocks reused and (opt-in) huge pages; see the crate docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// Advises huge pages for the 2 MiB-aligned part of `[ptr, ptr + size)`: a block of the system
/// allocator's, which owns the mapping around it (advising part of a mapping splits it in two
/// or three, which glibc's own `mremap` then refuses and works around by copying).
#[cfg(target_os = "linux")]
fn advise(ptr: *mut u8, size: usize) {
    if ptr.is_null() || size < HUGE_MIN || !huge_pages_on() {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + size) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: `[start, end)` lies inside a live allocation we own; MADV_HUGEPAGE only
        // changes how the kernel backs those pages, never their contents or validity. A failure
        // (e.g. THP compiled out) leaves the memory exactly as it was, so the result is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Advises huge pages for a whole fresh mapping of the pool's, `[base, base + len)` (page
/// aligned). The whole of it, never its 2 MiB-aligned interior: advice on part of a mapping
/// splits it into separate kernel mappings, and `mremap` refuses a range across two of them
/// (`EFAULT`), which is how growing a vector failed with the advice on. The kernel uses huge
/// pages only for the aligned 2 MiB extents inside anyway.
#[cfg(target_os = "linux")]
fn advise_mapping(base: usize, len: usize) {
    if len < HUGE_MIN || !huge_pages_on() {
        return;
    }
    // SAFETY: `[base, base + len)` is a live mapping of ours, page-aligned; MADV_HUGEPAGE
    // changes no contents or validity, and a failure leaves it as it was.
    unsafe {
        libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _size: usize) {}

#[cfg(target_os = "linux")]
mod pool;

/// Blocks from this size up stay in glibc's heap instead of a fresh `mmap` of their own (below
/// [`HUGE_MIN`], where our pool takes over).
pub const SYSTEM_MMAP_THRESHOLD: usize = HUGE_MIN;

/// Free memory at the top of a glibc heap kept instead of returned to the kernel.
pub const SYSTEM_TRIM_THRESHOLD: usize = 64 << 20;

/// Makes glibc keep mid-sized freed blocks (128 KiB to 4 MiB) for reuse. Call once, at start.
///
/// Why: by default glibc serves a block of 128 KiB or more with its own `mmap` until one is
/// freed, and returns a heap's free top to the kernel once it passes 128 KiB (both thresholds
/// then move, but only up to the size last freed). Homomorphic evaluation allocates and frees
/// polynomials of 128–640 KiB by the thousand (one APSI query at N = 8192: 220 ct×ct products
/// of a dozen such buffers each), so most of them came back as fresh pages, each faulted in and
/// zeroed by the kernel: 13 % of a labeled-PSI query's CPU time was `clear_page`. Fixed
/// thresholds — heap below [`SYSTEM_MMAP_THRESHOLD`], and up to [`SYSTEM_TRIM_THRESHOLD`] of free
/// top kept per heap — cut one relinearized product at N = 8192, [56, 48, 48] from 3.2 to
/// 2.8 ms (`cargo bench -p blindjoin-he --bench bfv -- 8192`). The cost is at most that much
/// memory kept by each glibc arena (one per thread in use, at most 8 per core) after a peak.
/// A no-op outside glibc.
pub fn tune_system_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets two of glibc's tuning variables (taking its own lock); the
    // values are in range for a c_int.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, SYSTEM_MMAP_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, SYSTEM_TRIM_THRESHOLD as libc::c_int);
    }
}

/// Unmaps the large blocks kept for reuse. A process that runs one job and exits never needs
/// this; a long-lived one (the Python module) calls it after each run so the memory goes back.
pub fn trim_pool() {
    #[cfg(target_os = "linux")]
    pool::trim();
}

/// Bytes of freed large blocks kept for reuse now (0 off Linux).
pub fn pooled_bytes() -> usize {
    #[cfg(target_os = "linux")]
    return pool::kept_bytes();
    #[cfg(not(target_os = "linux"))]
    0
}

/// Whether a block of this layout lives in our pool of large mappings (decided by the layout
/// alone, so `dealloc` and `realloc`, which get the same layout, agree with `alloc`).
#[cfg(target_os = "linux")]
fn pooled(size: usize, align: usize) -> bool {
    size >= pool::POOL_MIN && align <= pool::PAGE
}

#[cfg(not(target_os = "linux"))]
fn pooled(_size: usize, _align: usize) -> bool {
    false
}

// SAFETY: small blocks and over-aligned ones are `System`'s, with the caller's arguments
// unchanged. Large ones (`pooled`) are page-aligned blocks of our own mappings, at least as long
// as asked; a layout's size decides its side, and `realloc` moves contents across sides with a
// copy of the smaller length. `advise` changes no contents, size or alignment.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract; pooled blocks go back through `dealloc`.
        unsafe { alloc_either(layout, false) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { alloc_either(layout, true) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if pooled(layout.size(), layout.align()) {
            // SAFETY: a pooled layout's block came from `pool::alloc` or `pool::resize`.
            unsafe { pool::free(ptr) };
            return;
        }
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (was, will) = (
            pooled(layout.size(), layout.align()),
            pooled(new_size, layout.align()),
        );
        #[cfg(target_os = "linux")]
        if was && will {
            // SAFETY: `ptr` is a pooled block (its layout says so).
            return unsafe { pool::resize(ptr, layout.size(), new_size) };
        }
        if !was && !will {
            // SAFETY: forwarded contract.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if new_size > layout.size() {
                advise(p, new_size);
            }
            return p;
        }
        // Across sides: a new block, the common prefix copied, the old block freed.
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `new_layout` is valid and non-zero-sized (one side is pooled, the other ≥ 1
        // byte by `realloc`'s contract); `ptr` is live for `layout.size()` bytes.
        unsafe {
            let p = alloc_either(new_layout, false);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}

/// `alloc` / `alloc_zeroed` for either side.
///
/// # Safety
/// `layout` has a non-zero size.
unsafe fn alloc_either(layout: Layout, zeroed: bool) -> *mut u8 {
    #[cfg(target_os = "linux")]
    if pooled(layout.size(), layout.align()) {
        // SAFETY: freed through `dealloc` with the same (pooled) layout.
        return unsafe { pool::alloc(layout.size(), zeroed) };
    }
    // SAFETY: forwarded contract.
    let p = unsafe {
        if zeroed {
            System.alloc_zeroed(layout)
        } else {
            System.alloc(layout)
        }
    };
    advise(p, layout.size());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The pool is process-wide: tests that look at it take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    const MIB: usize = 1 << 20;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 16).unwrap()
    }

    /// After the tuning, mid-sized blocks (now from glibc's heap, not their own mappings) are
    /// still usable, written and read back; calling it twice is harmless.
    #[test]
    fn tuned_system_allocator_serves_mid_sized_blocks() {
        tune_system_allocator();
        tune_system_allocator();
        let mut blocks: Vec<Vec<u64>> = (0..64).map(|i| vec![i as u64; 40_000 + i]).collect();
        for (i, b) in blocks.iter_mut().enumerate() {
            assert!(b.iter().all(|&x| x == i as u64));
            b.iter_mut().for_each(|x| *x += 1);
        }
        drop(blocks);
        let again: Vec<u8> = vec![7; 3 << 20];
        assert!(again.iter().all(|&x| x == 7));
    }

    #[test]
    fn large_and_small_blocks_round_trip() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugePageAlloc;
        for (size, align) in [(1, 1), (4096, 64), (HUGE_MIN, 16), (3 * HUGE_MIN + 5, 4096)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0);
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                p.write_bytes(0xab, size);
                let q = a.realloc(p, layout, 2 * size);
                assert!(!q.is_null());
                assert_eq!(*q.add(size - 1), 0xab);
                a.dealloc(q, Layout::from_size_align(2 * size, align).unwrap());
            }
        }
    }

    /// With the huge-page advice on, large blocks still grow, move, split and come back: the
    /// advice once split a fresh mapping in three, and growing a vector in it then failed
    /// (`mremap` across mappings), which aborted the process.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_blocks_grow_and_split_with_huge_page_advice() {
        use std::sync::atomic::Ordering;
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugePageAlloc;
        trim_pool();
        HUGE_STATE.store(2, Ordering::Relaxed);
        let filled = |p: *mut u8, n: usize, v: u8| {
            // SAFETY: `p` is live for at least `n` bytes in every call below.
            unsafe { std::slice::from_raw_parts(p, n).iter().all(|&b| b == v) }
        };
        // SAFETY: every block is used within its size and freed once with its layout.
        let ok = std::panic::catch_unwind(|| unsafe {
            // A fresh, unaligned mapping grown twice: the case that failed.
            let p = a.alloc(layout(5 * MIB + 123));
            assert!(!p.is_null());
            p.write_bytes(3, 5 * MIB + 123);
            let q = a.realloc(p, layout(5 * MIB + 123), 10 * MIB);
            assert!(!q.is_null(), "growing an advised block");
            assert!(filled(q, 5 * MIB + 123, 3));
            let r = a.realloc(q, layout(10 * MIB), 40 * MIB);
            assert!(!r.is_null());
            assert!(filled(r, 5 * MIB + 123, 3));
            a.dealloc(r, layout(40 * MIB));
            // Pieces of the kept mapping, each grown past its piece.
            let s = a.alloc(layout(6 * MIB));
            let t = a.alloc(layout(6 * MIB));
            assert!(!s.is_null() && !t.is_null());
            s.write_bytes(5, 6 * MIB);
            t.write_bytes(6, 6 * MIB);
            let s2 = a.realloc(s, layout(6 * MIB), 20 * MIB);
            let t2 = a.realloc(t, layout(6 * MIB), 30 * MIB);
            assert!(!s2.is_null() && !t2.is_null());
            assert!(filled(s2, 6 * MIB, 5) && filled(t2, 6 * MIB, 6));
            a.dealloc(s2, layout(20 * MIB));
            a.dealloc(t2, layout(30 * MIB));
            // A kept mapping too short for the request, grown as it is handed out.
            trim_pool();
            let u = a.alloc(layout(4 * MIB));
            a.dealloc(u, layout(4 * MIB));
            let v = a.alloc_zeroed(layout(9 * MIB));
            assert!(!v.is_null());
            assert!(filled(v, 9 * MIB, 0));
            a.dealloc(v, layout(9 * MIB));
        });
        HUGE_STATE.store(0, Ordering::Relaxed);
        trim_pool();
        ok.unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn freed_large_blocks_are_reused_zeroed_split_and_trimmed() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugePageAlloc;
        trim_pool();
        // SAFETY: every block is used within its size and freed once with its layout.
        unsafe {
            // Freed, kept, and handed back for the next request that fits, zeroed if asked.
            let p = a.alloc(layout(8 * MIB));
            p.write_bytes(0xcd, 8 * MIB);
            a.dealloc(p, layout(8 * MIB));
            assert!(pooled_bytes() >= 8 * MIB);
            let q = a.alloc_zeroed(layout(8 * MIB));
            assert_eq!(q, p, "the kept block is reused");
            assert_eq!(pooled_bytes(), 0);
            assert!(
                std::slice::from_raw_parts(q, 8 * MIB)
                    .iter()
                    .all(|&b| b == 0)
            );

            // Grown (contents kept), then freed and split for a much smaller request.
            for (i, b) in std::slice::from_raw_parts_mut(q, 8 * MIB)
                .iter_mut()
                .enumerate()
            {
                *b = i as u8;
            }
            let r = a.realloc(q, layout(8 * MIB), 40 * MIB);
            assert!(!r.is_null());
            let r_bytes = std::slice::from_raw_parts(r, 8 * MIB);
            assert!(r_bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
            r.add(40 * MIB - 1).write(7);
            a.dealloc(r, layout(40 * MIB));
            let kept = pooled_bytes();
            assert!(kept >= 40 * MIB);
            let s = a.alloc(layout(5 * MIB));
            assert_eq!(s, r, "the front of the kept block");
            let tail = pooled_bytes();
            assert!(
                tail >= 30 * MIB && tail < kept,
                "the tail stays kept: {tail}"
            );
            let t = a.alloc_zeroed(layout(30 * MIB));
            assert!(
                std::slice::from_raw_parts(t, 30 * MIB)
                    .iter()
                    .all(|&b| b == 0)
            );

            // Across sides: large → small → large keeps the common prefix.
            s.write_bytes(0x5a, 5 * MIB);
            let small = a.realloc(s, layout(5 * MIB), 100);
            assert!(
                std::slice::from_raw_parts(small, 100)
                    .iter()
                    .all(|&b| b == 0x5a)
            );
            let big = a.realloc(small, layout(100), 6 * MIB);
            assert!(
                std::slice::from_raw_parts(big, 100)
                    .iter()
                    .all(|&b| b == 0x5a)
            );
            a.dealloc(big, layout(6 * MIB));
            a.dealloc(t, layout(30 * MIB));

            // A large shrink gives the tail back, and the block still works.
            let u = a.alloc(layout(64 * MIB));
            u.write_bytes(1, 64 * MIB);
            let v = a.realloc(u, layout(64 * MIB), 8 * MIB);
            assert_eq!(v, u);
            assert!(
                std::slice::from_raw_parts(v, 8 * MIB)
                    .iter()
                    .all(|&b| b == 1)
            );
            a.dealloc(v, layout(8 * MIB));
        }
        assert!(pooled_bytes() > 0);
        trim_pool();
        assert_eq!(pooled_bytes(), 0);
    }
}
