use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = settle::cli::Cli::parse();
    settle::cli::init_logging(&cli);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match runtime.block_on(settle::cli::run(cli)) {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
