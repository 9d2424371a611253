#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| hvnet_fuzz::flow_words(data));
