package dev.flatpull.fetcher.registry;

import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.security.cert.X509Certificate;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;
import okhttp3.OkHttpClient;

/** TLS that accepts any certificate, for endpoints whose hosts.toml says {@code skip_verify = true}, and only those. */
final class InsecureTls {
  private InsecureTls() {}

  static OkHttpClient derive(OkHttpClient base) {
    X509TrustManager trustAll =
        new X509TrustManager() {
          @Override
          public void checkClientTrusted(X509Certificate[] chain, String authType) {}

          @Override
          public void checkServerTrusted(X509Certificate[] chain, String authType) {}

          @Override
          public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
          }
        };
    try {
      SSLContext ctx = SSLContext.getInstance("TLS");
      ctx.init(null, new TrustManager[] {trustAll}, new SecureRandom());
      SSLSocketFactory factory = ctx.getSocketFactory();
      return base.newBuilder().sslSocketFactory(factory, trustAll).hostnameVerifier((h, s) -> true).build();
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("TLS is unavailable", e);
    }
  }
}
