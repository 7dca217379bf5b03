//! # blindjoin-alloc — the system allocator, with opt-in huge pages for big buffers
//!
//! PSI at 2^20 items per bucket allocates a few hundred MiB of large, short-lived vectors (VOLE
//! trees, OKVS rows, tag tables) and then reads them at random. [`HugePageAlloc`] forwards to
//! [`std::alloc::System`] and, on Linux when `BLINDJOIN_HUGE_PAGES=1` is set, asks for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`) on the 2 MiB-aligned interior of every
//! allocation of at least [`HUGE_MIN`] bytes: one page fault per 2 MiB instead of per 4 KiB, and
//! fewer TLB misses.
//!
//! **Off by default**, because what a first touch costs depends on the host. In a VM whose
//! balloon reports free pages to the host (Firecracker and most cloud VMs), a free 2 MiB block is
//! handed back to the host and must be faulted in and zeroed again there; a huge page then costs
//! 1.8 ms per MiB on first touch, against 0.55 ms per MiB for 4 KiB pages (measured on the
//! project's CI VM; `docs/benchmarks.md`). At 2^20 rows that was 0.3 s of each party's 1.4 s.
//! On bare metal, or where free pages stay with the guest, huge pages win, so the switch stays.
//! Where THP is disabled (`/sys/kernel/mm/transparent_hugepage/enabled` = `never`) the advice is
//! a no-op; on other systems the type is a plain pass-through.
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

/// The system allocator plus `MADV_HUGEPAGE` on large blocks; see the crate docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// Advises huge pages for the 2 MiB-aligned part of `[ptr, ptr + size)`.
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

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _size: usize) {}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and returns
// its result; `advise` does not change the allocation's contents, size or alignment.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise(p, new_size);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_blocks_round_trip() {
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
}
