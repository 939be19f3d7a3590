//! Generates the `proto.GRPCPinger` client and server from `proto/pinger.proto`.
//! protoc comes from `protoc-bin-vendored`, so building needs no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: build scripts are single-threaded; nothing else reads the environment here.
    unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    println!("cargo:rerun-if-changed=proto/pinger.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/pinger.proto"], &["proto"])?;
    Ok(())
}
