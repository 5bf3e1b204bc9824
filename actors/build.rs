//! When `scripts/common.sh` points `ROCKSDB_LIB_DIR` at a prebuilt RocksDB
//! (instead of compiling its C++), librocksdb-sys links it as a shared
//! library: the binaries and tests find it at run time through their rpath.
//! The server's package uses this script too.
fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_LIB_DIR");
    if let Ok(dir) = std::env::var("ROCKSDB_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
