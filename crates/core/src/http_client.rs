//! Outbound HTTP clients (model backends, test clients) with one TLS setup:
//! rustls on the `ring` provider, which builds in seconds where the default
//! provider needs a long C build. Redis over TLS uses the same provider.

use std::sync::Once;

static PROVIDER: Once = Once::new();

/// A reqwest client builder with the crypto provider installed.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}

/// Installs the process's TLS provider, once.
pub fn install_tls_provider() {
    PROVIDER.call_once(|| {
        // Err means another provider was installed first: that one serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
