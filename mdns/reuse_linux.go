package mdns



const soReusePort = 0xf // SO_REUSEPORT on Linux
