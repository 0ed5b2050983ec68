// A tiny Rust guest for the instrumentation tests, built as a cdylib for
// wasm32-unknown-unknown.
#![no_std]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

static mut COUNTER: u32 = 0;

/// Never returns.
#[no_mangle]
pub extern "C" fn spin() {
    loop {
        unsafe {
            let c = core::ptr::addr_of_mut!(COUNTER);
            c.write_volatile(c.read_volatile().wrapping_add(1));
        }
    }
}

/// Returns a checksum of a loop of n iterations.
#[no_mangle]
pub extern "C" fn count(n: u32) -> u32 {
    let mut s: u32 = 0;
    let mut i: u32 = 0;
    while i < n {
        s = s.wrapping_add(i ^ (s >> 3)).rotate_left(i % 7);
        i = core::hint::black_box(i + 1);
    }
    s
}
